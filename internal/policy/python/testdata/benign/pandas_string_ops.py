# result: ['Apple pie', 'apple crumble']
import pandas as pd

s = pd.Series(["Apple pie", "banana split", "Cherry tart", "apple crumble"])
print(s.str.lower().str.contains("apple"))
print(s.str.split().str[0].str.upper())
print(s.str.len().max())
s[s.str.contains("apple", case=False)].tolist()
