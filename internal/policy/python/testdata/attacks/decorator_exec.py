# expect: python.builtin
# exec as a decorator applied to a string made by another decorator.
@exec
@lambda _: "open(%r, 'w').close()" % '/tmp/moat-pwned-decorator_exec'
class X:
    pass
