# expect: python.attribute
# Walk up to the runner's frame and use its globals.
import sys
g = sys._getframe().f_back.f_globals
g['os'].system('touch /tmp/moat-pwned-frame_f_back_globals')
