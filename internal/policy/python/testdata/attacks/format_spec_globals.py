# expect: python.attribute
# A format field leaking a function's globals (read-only leak).
SECRET = 'PWNED'


def f():
    pass

print('{0.__globals__[SECRET]}'.format(f))
