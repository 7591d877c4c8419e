# expect: python.attribute
# Popen found among object's subclasses once some library imported subprocess.
import asyncio  # imports subprocess
popen = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]
popen(['touch', '/tmp/moat-pwned-subclasses_popen']).wait()
