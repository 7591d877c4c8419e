# result: ['F', 'C', 'A']
import bisect
import heapq

tasks = [(3, "low"), (1, "urgent"), (2, "normal")]
heapq.heapify(tasks)
print([heapq.heappop(tasks)[1] for _ in range(len(tasks))])
print(heapq.nlargest(2, [5, 1, 9, 3]), heapq.nsmallest(2, [5, 1, 9, 3]))
grades = [60, 70, 80, 90]
letters = "FDCBA"
[letters[bisect.bisect(grades, s)] for s in (55, 75, 95)]
