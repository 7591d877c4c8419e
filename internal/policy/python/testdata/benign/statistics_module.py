# result: 0.9984
import statistics as st

data = [2.5, 3.1, 4.7, 3.3, 2.9, 5.0, 4.1]
print(st.mean(data), st.median(data), round(st.stdev(data), 4))
print(st.quantiles(data, n=4))
print(st.mode([1, 2, 2, 3]))
round(st.correlation([1, 2, 3, 4], [2, 4, 6, 8.5]), 4)
