# expect: python.builtin
# Fullwidth letters: the parser NFKC-normalises identifiers, so this is eval.
ｅｖａｌ("open(%r, 'w').close()" % '/tmp/moat-pwned-unicode_nfkc_eval')
