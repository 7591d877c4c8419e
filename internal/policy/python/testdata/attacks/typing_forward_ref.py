# expect: python.process
# typing evaluates string annotations with eval.
import typing


def f(x: "__import__('os').system(%r)" % 'touch /tmp/moat-pwned-typing_forward_ref'):
    pass

typing.get_type_hints(f)
