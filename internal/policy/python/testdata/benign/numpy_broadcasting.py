# result: 18
import numpy as np

m = np.arange(12).reshape(3, 4)
centered = m - m.mean(axis=0)
print(centered)
outer = np.arange(1, 4)[:, None] * np.arange(1, 5)[None, :]
print(outer)
mask = m % 3 == 0
int(m[mask].sum())
