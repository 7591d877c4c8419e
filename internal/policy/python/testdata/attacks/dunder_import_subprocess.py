# expect: python.import
# __import__ with a literal name, then subprocess.
__import__('subprocess').call(['touch', '/tmp/moat-pwned-dunder_import_subprocess'])
