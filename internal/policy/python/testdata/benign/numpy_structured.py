# result: ['bob', 'ann']
import numpy as np

people = np.array([("ann", 31, 1.70), ("bob", 25, 1.82)],
                  dtype=[("name", "U10"), ("age", "i4"), ("height", "f8")])
print(people["name"], people["age"].mean())
people.sort(order="age")
people["name"].tolist()
