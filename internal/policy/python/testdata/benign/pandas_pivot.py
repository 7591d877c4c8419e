# result: 9.8
import pandas as pd

df = pd.DataFrame({
    "month": ["Jan", "Jan", "Feb", "Feb", "Mar", "Mar"],
    "city": ["Oslo", "Rome", "Oslo", "Rome", "Oslo", "Rome"],
    "temp": [-4.0, 8.5, -3.0, 9.8, 0.5, 12.9],
})
table = df.pivot_table(index="month", columns="city", values="temp", aggfunc="mean")
print(table)
long = table.reset_index().melt(id_vars="month", value_name="temp")
print(long.head())
float(table.loc["Feb", "Rome"])
