# expect: python.builtin
# Obfuscated payload: base64, then exec.
import base64
payload = base64.b64encode(("open(%r, 'w').close()" % '/tmp/moat-pwned-base64_exec').encode())
exec(base64.b64decode(payload))
