# expect: python.import
# timeit compiles and runs a string: the code it runs is still user code.
import timeit
timeit.timeit("import subprocess; subprocess.run(['touch', %r])" % '/tmp/moat-pwned-timeit_string', number=1)
