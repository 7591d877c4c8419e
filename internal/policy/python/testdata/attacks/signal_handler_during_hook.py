# expect: python.process
# Run code inside the audit hook: a timer signal's handler runs between the hook's
# bytecodes. It acts only when the frame it interrupted is the runner's, i.e. while
# the hook walks frames for the library call below; a hook that ignored events while
# busy would miss it. (Without a hook it acts at the end, to prove the payload works.)
import inspect, os, signal


def j(*parts):
    return ''.join(parts)


state = {'in_hook': 0, 'done': False}


def payload():
    state['done'] = True
    getattr(os, j('sys', 'tem'))('touch /tmp/moat-pwned-signal_handler_during_hook')


def handler(signum, frame):
    if frame is not None and frame.f_code.co_filename.endswith(('runner.py', 'runner.pyc')):
        state['in_hook'] += 1
        payload()


signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)
for _ in range(300000):
    inspect.currentframe()
    if state['done']:
        break
signal.setitimer(signal.ITIMER_REAL, 0)
if not state['done']:
    payload()
