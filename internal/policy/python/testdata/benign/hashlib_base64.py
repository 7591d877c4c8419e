import base64
import hashlib
import hmac

data = b"moat analysis"
print(hashlib.sha256(data).hexdigest())
print(hashlib.md5(data).hexdigest())
token = base64.urlsafe_b64encode(data).decode()
print(token, base64.urlsafe_b64decode(token))
hmac.new(b"key", data, "sha1").hexdigest()[:8]
