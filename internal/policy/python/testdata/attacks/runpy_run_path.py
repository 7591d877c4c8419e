# expect: python.import
# runpy runs a file the program wrote.
import runpy
path = '/tmp/moat-payload-runpy_run_path.py'
with open(path, 'w') as f:
    f.write("import subprocess\nsubprocess.run(['touch', %r])\n" % '/tmp/moat-pwned-runpy_run_path')
runpy.run_path(path)
