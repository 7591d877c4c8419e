# result: 15.0
import pandas as pd

prices = pd.Series([10, 11, 12, 11, 13, 15, 14, 16], name="price")
frame = pd.DataFrame({"price": prices, "ma3": prices.rolling(3).mean(),
                      "pct": prices.pct_change().round(3), "cummax": prices.cummax()})
print(frame)
round(float(frame["ma3"].iloc[-1]), 3)
