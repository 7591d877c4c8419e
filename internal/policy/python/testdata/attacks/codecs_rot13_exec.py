# expect: python.builtin
# rot13-encoded payload, decoded by codecs, then exec.
import codecs
exec(codecs.decode("bcra(%r, 'j').pybfr()" % codecs.encode('/tmp/moat-pwned-codecs_rot13_exec', 'rot13'), 'rot13'))
