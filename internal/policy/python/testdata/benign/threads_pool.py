# result: ['A', 'B']
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed

lock = threading.Lock()
total = 0


def work(n):
    global total
    with lock:
        total += n
    return n * n


with ThreadPoolExecutor(max_workers=4) as pool:
    futures = [pool.submit(work, n) for n in range(10)]
    squares = sorted(f.result() for f in as_completed(futures))
print(squares[:4], total)
list(ThreadPoolExecutor(2).map(str.upper, ["a", "b"]))
