# expect: python.file
# success: stdout "deny_builtins"
# site's license() prints the files it is told to: the policy.
import os, sys
policy = os.path.join(os.path.dirname(sys.argv[0]), 'policy.json')
license._Printer__filenames = [policy]
license._Printer__lines = None
license()
