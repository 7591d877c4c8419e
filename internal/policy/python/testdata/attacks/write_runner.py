# expect: python.file
# Overwrite the runner next to the program (/.moat/runner.py in a box).
import os, sys
path = os.path.join(os.path.dirname(sys.argv[0]), 'runner.py')
with open(path, 'a') as f:
    f.write('\n# tampered\n')
open('/tmp/moat-pwned-write_runner', 'w').close()
