# expect: python.builtin
# getattr on __builtins__ with a computed name.
e = getattr(__builtins__, 'ev' + 'al')
e("__import__('os').system(%r)" % 'touch /tmp/moat-pwned-getattr_builtins_concat')
