# result: 5
import pandas as pd

df = pd.DataFrame({"a": range(10), "b": [x * x for x in range(10)]})
limit = 20
print(df.query("a > 5 and b < 70"))
print(df[df.b > limit])
len(df.query("b > @limit"))
