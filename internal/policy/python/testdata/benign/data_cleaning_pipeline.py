# result: {'A': 110.0, 'B': 87.5}
import csv
import io
import statistics
from collections import defaultdict

raw = """date,store,revenue
2024-01-01,A, 100
2024-01-01,B,n/a
2024-01-02,A,120
2024-01-02,B,80
2024-01-03,A,
2024-01-03,B,95
"""
by_store = defaultdict(list)
skipped = 0
for row in csv.DictReader(io.StringIO(raw)):
    try:
        by_store[row["store"]].append(float(row["revenue"].strip()))
    except ValueError:
        skipped += 1
report = {s: round(statistics.mean(v), 1) for s, v in sorted(by_store.items())}
print("skipped", skipped)
report
