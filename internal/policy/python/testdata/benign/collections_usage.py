# result: 3
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple

words = "the quick brown fox jumps over the lazy dog the end".split()
counts = Counter(words)
print(counts.most_common(2))
groups = defaultdict(list)
for w in words:
    groups[len(w)].append(w)
print(dict(groups))
q = deque(maxlen=3)
for i in range(5):
    q.append(i)
print(list(q))
Point = namedtuple("Point", "x y")
p = Point(1, 2)
print(p._replace(y=5), OrderedDict(a=1, b=2))
counts["the"]
