# expect: python.process
import signal, threading
signal.pthread_kill(threading.get_ident(), 0)
open('/tmp/moat-pwned-signal_pthread_kill', 'w').close()
