# expect: python.import
# code.InteractiveInterpreter runs source like a REPL.
import code
code.InteractiveInterpreter().runsource("import subprocess; subprocess.run(['touch', %r])" % '/tmp/moat-pwned-code_interactive', '<x>', 'exec')
