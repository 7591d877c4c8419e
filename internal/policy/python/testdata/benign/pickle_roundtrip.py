# result: [1, 'two', 3.0, None]
import pickle
from dataclasses import dataclass


@dataclass
class Point:
    x: int
    y: int


data = {"points": [Point(1, 2), Point(3, 4)], "name": "route", "tags": {"a", "b"}, "t": (1, 2.5)}
with open("route.pkl", "wb") as f:
    pickle.dump(data, f)
with open("route.pkl", "rb") as f:
    back = pickle.load(f)
print(back["points"], back == data)
pickle.loads(pickle.dumps([1, "two", 3.0, None]))
