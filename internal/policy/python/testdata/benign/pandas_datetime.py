# result: [1, 1, 2, 2, 3]
import pandas as pd

s = pd.Series(["2024-01-01", "2024-01-15", "2024-02-03", "2024-02-20", "2024-03-05"])
dates = pd.to_datetime(s)
df = pd.DataFrame({"date": dates, "amount": [10, 20, 30, 40, 50]}).set_index("date")
monthly = df.resample("MS")["amount"].sum()
print(monthly)
print(dates.dt.day_name().tolist())
print((dates.max() - dates.min()).days)
df.index.month.tolist()
