# expect: python.call
# os through sys.modules.
import sys
sys.modules['os'].system('touch /tmp/moat-pwned-sys_modules_os')
