# expect: python.import
def j(*parts):
    return ''.join(parts)


# threading's run() calls __import__ for us: a library frame as a trampoline.
import builtins, sys, threading
imp = getattr(builtins, j('__imp', 'ort__'))
t = threading.Thread(target=imp, args=(j('sub', 'process'),))
t.start()
t.join()
sys.modules[j('sub', 'process')].run(['touch', '/tmp/moat-pwned-thread_trampoline_import'])
