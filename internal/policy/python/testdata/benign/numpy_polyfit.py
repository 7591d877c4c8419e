# result: 9.0
import numpy as np

x = np.linspace(0, 5, 20)
y = 3 * x ** 2 - 2 * x + 1
coef = np.polyfit(x, y, 2)
print(np.round(coef, 6))
p = np.poly1d(coef)
round(float(p(2.0)), 6)
