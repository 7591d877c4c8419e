# expect: python.import
# A str subclass whose methods lie about its contents, to fool checks that call them.
import builtins, sys


def j(*parts):
    return ''.join(parts)


class S(str):
    def startswith(self, *a):
        return False

    def endswith(self, *a):
        return False

    def partition(self, sep):
        return ('json', '', '')

    def split(self, *a):
        return ['json']

    def find(self, *a):
        return -1

    def __contains__(self, x):
        return False


imp = getattr(builtins, j('__imp', 'ort__'))
imp(S(j('sub', 'process')))
sys.modules[j('sub', 'process')].run(['touch', '/tmp/moat-pwned-str_subclass_confusion'])
