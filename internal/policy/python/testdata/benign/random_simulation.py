# result: 2
import random

random.seed(12345)
inside = sum(1 for _ in range(20000) if random.random() ** 2 + random.random() ** 2 <= 1)
print("pi ~", 4 * inside / 20000)
deck = list(range(10))
random.shuffle(deck)
print(deck, random.sample(range(100), 3), random.choice("abc"), random.uniform(1, 2))
random.seed(1)
random.randint(1, 6)
