# expect: python.import
import _posixsubprocess
print(_posixsubprocess.fork_exec)
open('/tmp/moat-pwned-posixsubprocess_import', 'w').close()
