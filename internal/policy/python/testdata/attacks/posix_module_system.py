# expect: python.call
import posix
posix.system('touch /tmp/moat-pwned-posix_module_system')
