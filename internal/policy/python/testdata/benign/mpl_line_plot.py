# result: True
import os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

x = np.linspace(0, 2 * np.pi, 200)
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(x, np.sin(x), label="sin")
ax.plot(x, np.cos(x), label="cos", linestyle="--")
ax.set_xlabel("x")
ax.set_ylabel("value")
ax.set_title("Trigonometry")
ax.legend()
fig.tight_layout()
fig.savefig("trig.png", dpi=80)
plt.close(fig)
os.path.getsize("trig.png") > 1000
