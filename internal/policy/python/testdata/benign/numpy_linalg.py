# result: [2.0, 3.0]
import numpy as np

a = np.array([[3.0, 1.0], [1.0, 2.0]])
b = np.array([9.0, 8.0])
x = np.linalg.solve(a, b)
print("solution", x)
print("det", round(np.linalg.det(a), 6))
print("inv", np.linalg.inv(a).round(4))
w, v = np.linalg.eig(a)
print("eigenvalues", np.sort(w).round(4))
x.tolist()
