# expect: python.import
# A network connection (the box has no network; the runner says so first).
import socket
s = socket.socket()
try:
    s.connect(('127.0.0.1', 9))
except OSError:
    pass
open('/tmp/moat-pwned-socket_connect', 'w').close()
