# expect: python.hook
def j(*parts):
    return ''.join(parts)


# Find moat's audit hook among all objects to rewrite its closure.
import gc
objs = getattr(gc, j('get_', 'objects'))()
open('/tmp/moat-pwned-gc_get_objects', 'w').close()
