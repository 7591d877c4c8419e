# expect: python.attribute
# string.Formatter.get_field walks attributes named in a format string.
import os, string


def f():
    pass

g = string.Formatter().get_field('0.__globals__', (f,), {})[0]
g['os'].system('touch /tmp/moat-pwned-formatter_get_field')
