# result: 4.0
import pandas as pd

df = pd.DataFrame({"k": ["a", "b"], "v": [1.5, 2.5]})
df.to_json("data.json", orient="records")
back = pd.read_json("data.json")
print(back)
df.to_csv("data.tsv", sep="\t", index=False)
print(open("data.tsv").read())
back["v"].sum()
