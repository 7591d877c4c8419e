# expect: python.import
import pty
pty.spawn(['touch', '/tmp/moat-pwned-pty_spawn'])
