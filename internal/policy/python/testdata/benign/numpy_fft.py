# result: [5, 12]
import numpy as np

t = np.linspace(0, 1, 128, endpoint=False)
signal = np.sin(2 * np.pi * 5 * t) + 0.5 * np.sin(2 * np.pi * 12 * t)
spectrum = np.abs(np.fft.rfft(signal))
freqs = np.fft.rfftfreq(t.size, d=t[1] - t[0])
top = freqs[np.argsort(spectrum)[-2:]]
sorted(top.round().astype(int).tolist())
