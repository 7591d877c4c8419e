# result: 'iVBORw0K'
import base64
import io
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

fig, ax = plt.subplots()
ax.pie([30, 45, 25], labels=["x", "y", "z"], autopct="%1.0f%%")
buf = io.BytesIO()
fig.savefig(buf, format="png")
encoded = base64.b64encode(buf.getvalue()).decode()
encoded[:8]
