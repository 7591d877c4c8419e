# expect: python.hook
# A trace function receives every frame, the runner's included.
import sys
sys.settrace(lambda frame, event, arg: None)
open('/tmp/moat-pwned-settrace_frames', 'w').close()
