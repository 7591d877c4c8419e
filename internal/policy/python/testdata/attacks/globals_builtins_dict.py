# expect: python.import
def j(*parts):
    return ''.join(parts)


# The program's own __builtins__ via globals() and a computed key, then __import__.
b = globals()[j('__buil', 'tins__')]
b = b if isinstance(b, dict) else vars(b)
sp = b[j('__imp', 'ort__')](j('sub', 'process'))
sp.run(['touch', '/tmp/moat-pwned-globals_builtins_dict'])
