# expect: python.exec
def j(*parts):
    return ''.join(parts)


import builtins, threading
ex = getattr(builtins, j('ex', 'ec'))
t = threading.Thread(target=ex, args=("open(%r, 'w').close()" % '/tmp/moat-pwned-thread_target_exec',))
t.start()
t.join()
