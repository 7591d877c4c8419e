# result: ['Apple', 'banana', 'cherry']
from operator import attrgetter, itemgetter

people = [{"name": "Zoe", "age": 28}, {"name": "adam", "age": 35}, {"name": "Bea", "age": 28}]
by_age_then_name = sorted(people, key=lambda p: (p["age"], p["name"].lower()))
print([p["name"] for p in by_age_then_name])
print(sorted(people, key=itemgetter("age"), reverse=True)[0]["name"])


class P:
    def __init__(self, name):
        self.name = name


print([p.name for p in sorted([P("b"), P("a")], key=attrgetter("name"))])
sorted(["banana", "Apple", "cherry"], key=str.casefold)
