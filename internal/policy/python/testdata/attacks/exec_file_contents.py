# expect: python.builtin
# exec() of a file's contents (the issue used /etc/passwd; here a payload file).
path = '/tmp/moat-payload-exec_file_contents.py'
with open(path, 'w') as f:
    f.write("open(%r, 'w').close()\n" % '/tmp/moat-pwned-exec_file_contents')
exec(open(path).read())
