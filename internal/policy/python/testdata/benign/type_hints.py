# result: 10
from __future__ import annotations

from typing import Callable, NamedTuple


class Pair(NamedTuple):
    left: int
    right: int


def apply(f: Callable[[int], int], pair: Pair) -> Pair:
    return Pair(f(pair.left), f(pair.right))


def double(x: int) -> int:
    return x * 2


result: Pair = apply(double, Pair(2, 5))
print(result, apply.__annotations__["return"])
result.right
