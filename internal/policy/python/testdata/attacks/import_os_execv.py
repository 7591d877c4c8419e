# expect: python.call
__import__('os').execv('/usr/bin/touch', ['touch', '/tmp/moat-pwned-import_os_execv'])
