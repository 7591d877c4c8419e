# expect: python.process
def j(*parts):
    return ''.join(parts)


# subprocess's own reference to _posixsubprocess.fork_exec, which raises no audit event.
import asyncio, os, sys
sp = sys.modules[j('sub', 'process')]
fork_exec = getattr(sp, j('_fork', '_exec'))
r, w = os.pipe()
pid = fork_exec([b'touch', '/tmp/moat-pwned-posixsubprocess_fork_exec'.encode()], [b'/usr/bin/touch'], True, (w,), None, None,
                -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)
os.waitpid(pid, 0)
