# expect: python.builtin
# compile() a string, then exec the code object.
code = compile("open(%r, 'w').close()" % '/tmp/moat-pwned-compile_then_exec', 'x', 'exec')
exec(code)
