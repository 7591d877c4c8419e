# expect: python.import
# doctest runs the examples of a docstring.
import doctest


def f():
    """
    >>> import subprocess; _ = subprocess.run(['touch', CANARY_PATH])
    """

doctest.run_docstring_examples(f, {'CANARY_PATH': '/tmp/moat-pwned-doctest_string'})
