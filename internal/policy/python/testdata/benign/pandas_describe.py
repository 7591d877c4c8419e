# result: 200
import numpy as np
import pandas as pd

rng = np.random.default_rng(0)
df = pd.DataFrame({"height": rng.normal(170, 10, 200), "weight": rng.normal(70, 8, 200)})
df["bmi"] = df["weight"] / (df["height"] / 100) ** 2
print(df.describe().round(2))
print(df.corr().round(3))
int(df.shape[0])
