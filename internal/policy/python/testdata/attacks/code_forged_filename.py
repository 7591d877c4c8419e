# expect: python.exec
# code.InteractiveInterpreter compiles under a file name the program chooses.
import code
src = "import ctypes\nctypes.CDLL(None).system(%r)" % 'touch /tmp/moat-pwned-code_forged_filename'.encode()
code.InteractiveInterpreter().runsource(src, '/usr/lib/python3.11/os.py', 'exec')
