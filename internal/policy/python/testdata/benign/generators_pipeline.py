# result: 10.5
def read_numbers(lines):
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            yield float(line)


def running_total(numbers):
    total = 0.0
    for n in numbers:
        total += n
        yield total


def take(n, it):
    for i, x in enumerate(it):
        if i >= n:
            return
        yield x


lines = ["1", "# comment", "2.5", "", "3", "4"]
totals = list(running_total(read_numbers(lines)))
print(totals, list(take(2, iter(totals))))
gen = (x * x for x in range(5))
print(next(gen), sum(gen))
totals[-1]
