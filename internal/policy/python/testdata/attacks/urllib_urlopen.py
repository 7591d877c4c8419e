# expect: python.network
import urllib.request
try:
    urllib.request.urlopen('http://127.0.0.1:9/', timeout=2)
except OSError:
    pass
open('/tmp/moat-pwned-urllib_urlopen', 'w').close()
