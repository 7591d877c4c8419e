# result: 9
import itertools

items = ["a", "b", "c"]
print(list(itertools.combinations(items, 2)))
print(list(itertools.permutations(items, 2))[:3])
print(list(itertools.accumulate([1, 2, 3, 4])))
pairs = sorted([("x", 1), ("y", 2), ("x", 3)])
print({k: [v for _, v in g] for k, g in itertools.groupby(pairs, key=lambda t: t[0])})
print(list(itertools.islice(itertools.count(10, 5), 4)))
len(list(itertools.product(range(3), repeat=2)))
