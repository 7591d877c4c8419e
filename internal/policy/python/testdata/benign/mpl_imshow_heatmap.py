import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

data = np.arange(16).reshape(4, 4)
fig, ax = plt.subplots()
im = ax.imshow(data, cmap="viridis")
fig.colorbar(im, ax=ax)
for (i, j), v in np.ndenumerate(data):
    ax.text(j, i, str(v), ha="center", va="center", color="w")
ax.set_xticks(range(4))
ax.set_xticklabels(list("abcd"))
fig.savefig("heatmap.png", bbox_inches="tight")
print("ok")
