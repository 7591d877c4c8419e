# result: 2.0
import numpy as np

data = np.array([2, 4, 4, 4, 5, 5, 7, 9], dtype=float)
print("mean", data.mean(), "median", np.median(data), "std", data.std())
print("p90", np.percentile(data, 90))
counts, edges = np.histogram(data, bins=4)
print(counts, edges)
print(np.corrcoef(data, data ** 2).round(3))
float(data.std())
