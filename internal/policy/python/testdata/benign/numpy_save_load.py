# result: True
import numpy as np

a = np.arange(6, dtype=np.int64).reshape(2, 3)
np.save("array.npy", a)
np.savetxt("array.csv", a, delimiter=",", fmt="%d")
b = np.load("array.npy")
c = np.loadtxt("array.csv", delimiter=",", dtype=int)
print(b, c, sep="\n")
bool((a == b).all() and (a == c).all())
