# expect: python.call
# The first vector: a shell command through os.system.
import os
os.system('touch /tmp/moat-pwned-os_system')
