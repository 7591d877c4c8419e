# expect: python.call
# Signal 0 only checks the process exists; a real attack would kill something.
import os
os.kill(os.getpid(), 0)
open('/tmp/moat-pwned-os_kill', 'w').close()
