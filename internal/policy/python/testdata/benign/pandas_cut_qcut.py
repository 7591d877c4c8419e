# result: ['child', 'child', 'adult']
import pandas as pd

ages = pd.Series([5, 17, 25, 33, 41, 58, 63, 77])
bins = pd.cut(ages, bins=[0, 18, 65, 120], labels=["child", "adult", "senior"])
print(bins.value_counts().sort_index())
print(pd.qcut(ages, 4, labels=False).tolist())
bins.astype(str).tolist()[:3]
