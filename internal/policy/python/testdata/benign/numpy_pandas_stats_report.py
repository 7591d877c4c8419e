# result: 2.0
import numpy as np
import pandas as pd

rng = np.random.default_rng(7)
df = pd.DataFrame({"group": rng.choice(["a", "b", "c"], 300), "x": rng.normal(size=300)})
df["y"] = 2 * df["x"] + rng.normal(scale=0.1, size=300)
stats = df.groupby("group").agg(n=("x", "size"), mean_x=("x", "mean"), corr=("x", lambda s: s.corr(df.loc[s.index, "y"])))
print(stats.round(3))
slope = np.polyfit(df["x"], df["y"], 1)[0]
round(float(slope), 1)
