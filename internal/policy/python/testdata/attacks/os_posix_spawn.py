# expect: python.call
import os
pid = os.posix_spawn('/usr/bin/touch', ['touch', '/tmp/moat-pwned-os_posix_spawn'], os.environ)
os.waitpid(pid, 0)
