# result: 150.0
# Write a CSV, read it back, aggregate; the trailing expression is the notebook result.
import pandas as pd

rows = [("north", "widget", 100), ("south", "widget", 200), ("north", "gadget", 150),
        ("south", "gadget", 150), ("east", "widget", 120), ("east", "gadget", 180)]
with open("sales.csv", "w") as f:
    f.write("region,product,value\n")
    for r in rows:
        f.write("%s,%s,%d\n" % r)

df = pd.read_csv("sales.csv")
print(df.groupby("region")["value"].sum())
print(df.groupby(["region", "product"]).agg(total=("value", "sum"), n=("value", "count")))
df['value'].mean()
