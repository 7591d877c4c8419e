# expect: python.process
def j(*parts):
    return ''.join(parts)


# Replace sys.modules entries to confuse checks that look modules up by name.
import sys, os
mods = getattr(sys, j('mod', 'ules'))
real = mods[j('o', 's')]
mods[j('o', 's')] = type(sys)('os')
mods[j('pos', 'ix')] = type(sys)('posix')
getattr(real, j('sys', 'tem'))('touch /tmp/moat-pwned-sys_modules_swap')
