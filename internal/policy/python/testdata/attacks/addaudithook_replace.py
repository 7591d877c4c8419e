# expect: python.hook
def j(*parts):
    return ''.join(parts)


# Add another audit hook (it cannot remove moat's, but the attempt is refused).
import sys
getattr(sys, j('addaudit', 'hook'))(lambda event, args: None)
open('/tmp/moat-pwned-addaudithook_replace', 'w').close()
