# result: 8.0
import numpy as np
import pandas as pd

df = pd.DataFrame({"a": [1, np.nan, 3, None], "b": ["x", None, "z", "w"]})
print(df.isna().sum())
filled = df.fillna({"a": df["a"].mean(), "b": "missing"})
print(filled)
print(df.dropna())
float(filled["a"].sum())
