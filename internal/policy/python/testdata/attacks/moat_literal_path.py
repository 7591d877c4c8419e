# expect: python.file
# control: skip /.moat exists only inside a box
print(open('/.moat/policy.json').read())
open('/tmp/moat-pwned-moat_literal_path', 'w').close()
