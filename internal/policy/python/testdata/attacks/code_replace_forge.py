# expect: python.attribute
def j(*parts):
    return ''.join(parts)


# Relabel a code object with a library file name to pass as library code.
def payload():
    open(path, 'w').close()
code = getattr(payload, j('__co', 'de__')).replace(co_filename='/usr/lib/python3.11/os.py')
type(payload)(code, {'path': '/tmp/moat-pwned-code_replace_forge', 'open': open})()
