# expect: python.attribute
import functools, os


def f():
    pass

g = functools.reduce(getattr, ['__globals__'], f)
g['os'].system('touch /tmp/moat-pwned-functools_reduce_getattr')
