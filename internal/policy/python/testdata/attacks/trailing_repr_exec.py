# expect: python.exec
# The runner calls repr() on the trailing expression: make repr a call of exec that
# no user frame makes (a partial is called from the runner's frame, in C).
import builtins, functools


def j(*parts):
    return ''.join(parts)


class X:
    __repr__ = functools.partial(getattr(builtins, j('ex', 'ec')),
                                 "open('/tmp/moat-pwned-trailing_repr_exec', 'w').close()")

X()
