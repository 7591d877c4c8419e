# result: {'n': 0.6, 'y': 0.4}
import pandas as pd

df = pd.DataFrame({"sex": ["m", "f", "f", "m", "f"], "smoker": ["y", "n", "y", "n", "n"]})
print(pd.crosstab(df["sex"], df["smoker"], margins=True))
df["smoker"].value_counts(normalize=True).round(2).to_dict()
