# expect: python.builtin
# Code run by a metaclass call when the class statement executes.
class X(metaclass=lambda *a: __import__('os').system('touch /tmp/moat-pwned-metaclass_import')):
    pass
