# result: 290
import pandas as pd

idx = pd.MultiIndex.from_product([["2023", "2024"], ["Q1", "Q2"]], names=["year", "quarter"])
df = pd.DataFrame({"revenue": [100, 120, 130, 160]}, index=idx)
print(df.unstack())
print(df.xs("2024", level="year"))
int(df.groupby(level="year")["revenue"].sum()["2024"])
