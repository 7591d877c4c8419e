# No matplotlib.use(): the backend is chosen automatically (Agg without a display).
import matplotlib.pyplot as plt

plt.figure()
plt.bar(["a", "b", "c"], [3, 5, 2], color="steelblue")
plt.title("Counts")
plt.savefig("bars.png")
print("saved")
