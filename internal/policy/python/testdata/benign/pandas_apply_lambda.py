# result: {'pass': 2, 'fail': 1}
import pandas as pd

df = pd.DataFrame({"name": ["alpha", "beta", "gamma"], "score": [3, 7, 5]})
df["grade"] = df["score"].apply(lambda s: "pass" if s >= 5 else "fail")
df["name_len"] = df["name"].map(len)
df["both"] = df.apply(lambda row: f"{row['name']}:{row['score']}", axis=1)
print(df)
df["grade"].value_counts().to_dict()
