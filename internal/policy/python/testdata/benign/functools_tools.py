# result: 12586269025
import functools


@functools.lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print("calling", fn.__name__)
        return fn(*args, **kwargs)
    return wrapper


@logged
def add(a, b):
    return a + b


power = functools.partial(pow, exp=2)
print(add(2, 3), power(7), functools.reduce(lambda a, b: a * b, range(1, 6)))
print(add.__name__, fib.cache_info().hits >= 0)
fib(50)
