# result: 2
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

rng = np.random.default_rng(3)
x, y = rng.normal(size=300), rng.normal(size=300)
fig, axes = plt.subplots(1, 2, figsize=(8, 3))
axes[0].hist(x, bins=20, color="gray")
axes[0].set_title("histogram")
axes[1].scatter(x, y, s=5, alpha=0.5)
axes[1].set_title("scatter")
fig.suptitle("Two panels")
fig.savefig("panels.png")
len(fig.axes)
