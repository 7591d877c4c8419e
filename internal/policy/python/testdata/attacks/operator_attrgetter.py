# expect: python.attribute
import operator, os


def f():
    pass

operator.attrgetter('__globals__')(f)['os'].system('touch /tmp/moat-pwned-operator_attrgetter')
