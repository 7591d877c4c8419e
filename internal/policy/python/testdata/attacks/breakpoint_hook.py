# expect: python.builtin
# breakpoint() calls sys.breakpointhook with its arguments: make that os.system.
import os, sys
sys.breakpointhook = os.system
breakpoint('touch /tmp/moat-pwned-breakpoint_hook')
