# result: 1023
import sys

sys.setrecursionlimit(5000)


def depth(tree):
    if not isinstance(tree, list):
        return 0
    return 1 + max((depth(t) for t in tree), default=0)


def flatten(tree):
    for t in tree:
        if isinstance(t, list):
            yield from flatten(t)
        else:
            yield t


def hanoi(n, a="A", b="B", c="C", moves=None):
    moves = [] if moves is None else moves
    if n:
        hanoi(n - 1, a, c, b, moves)
        moves.append((a, c))
        hanoi(n - 1, b, a, c, moves)
    return moves


tree = [1, [2, [3, [4]]], 5]
print(depth(tree), list(flatten(tree)))
len(hanoi(10))
