# expect: python.call
import os
os.popen('touch /tmp/moat-pwned-os_popen').read()
