# expect: python.import
# A module the program writes into its working directory and imports.
with open('helper_workspace_module.py', 'w') as f:
    f.write("import subprocess\nsubprocess.run(['touch', %r])\n" % '/tmp/moat-pwned-workspace_module')
import helper_workspace_module
