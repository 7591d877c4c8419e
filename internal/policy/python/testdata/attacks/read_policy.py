# expect: python.file
# success: stdout "deny_builtins"
# Read the policy next to the program (/.moat/policy.json in a box).
import os, sys
print(open(os.path.join(os.path.dirname(sys.argv[0]), 'policy.json')).read())
