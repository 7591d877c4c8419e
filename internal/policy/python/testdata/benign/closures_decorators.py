# result: 7
def counter():
    count = 0

    def inc(step=1):
        nonlocal count
        count += step
        return count
    return inc


def repeat(times):
    def deco(fn):
        def wrapper(*args):
            return [fn(*args) for _ in range(times)]
        return wrapper
    return deco


@repeat(3)
def greet(name):
    return f"hi {name}"


c = counter()
c()
c(5)
print(greet("ann"))
multipliers = [lambda x, k=k: x * k for k in range(3)]
print([m(10) for m in multipliers])
c()
