import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import os
import pandas as pd

df = pd.DataFrame({"year": [2020, 2021, 2022, 2023], "sales": [10, 14, 9, 17], "cost": [7, 9, 8, 10]})
ax = df.plot(x="year", y=["sales", "cost"], kind="bar", rot=0, title="Sales and cost")
ax.figure.savefig("sales.png")
df.plot.scatter(x="sales", y="cost").figure.savefig("scatter.png")
plt.close("all")
print(sorted(p for p in os.listdir(".") if p.endswith(".png")))
