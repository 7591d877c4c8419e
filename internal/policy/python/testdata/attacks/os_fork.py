# expect: python.call
import os
pid = os.fork()
if pid == 0:
    open('/tmp/moat-pwned-os_fork', 'w').close()
    os._exit(0)
os.waitpid(pid, 0)
