# result: ['a', 'b', 'c', 'd']
import pandas as pd

a = pd.DataFrame({"x": [3, 1], "y": ["c", "a"]})
b = pd.DataFrame({"x": [2, 4], "y": ["b", "d"]})
both = pd.concat([a, b], ignore_index=True).sort_values("x")
print(both)
both.drop_duplicates().reset_index(drop=True)["y"].tolist()
