# result: ['a', 'b', 'c']
import numpy as np

rng = np.random.default_rng(seed=42)
sample = rng.normal(loc=10, scale=2, size=1000)
print(round(sample.mean(), 2), round(sample.std(), 2))
np.random.seed(1)
print(np.random.randint(0, 10, size=5))
choice = rng.choice(["a", "b", "c"], size=3, replace=False)
sorted(choice.tolist())
