# expect: python.exec
def j(*parts):
    return ''.join(parts)


# eval reached through the builtins module with a name no static check can read.
import builtins
ev = getattr(builtins, j('ev', 'al'))
ev("__import__('os').system(%r)" % 'touch /tmp/moat-pwned-builtins_module_computed_eval')
