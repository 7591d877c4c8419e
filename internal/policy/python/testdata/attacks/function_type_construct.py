# expect: python.attribute
def j(*parts):
    return ''.join(parts)


# Build a function from another function's code object with chosen globals.
def payload():
    open(path, 'w').close()
FunctionType = type(lambda: 0)
code = getattr(payload, j('__co', 'de__'))
FunctionType(code, {'path': '/tmp/moat-pwned-function_type_construct', 'open': open})()
