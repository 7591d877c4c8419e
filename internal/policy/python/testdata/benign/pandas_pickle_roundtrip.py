# result: True
import pandas as pd

df = pd.DataFrame({"a": [1, 2], "b": pd.to_datetime(["2024-01-01", "2024-06-01"])})
df.to_pickle("frame.pkl")
back = pd.read_pickle("frame.pkl")
back.equals(df)
