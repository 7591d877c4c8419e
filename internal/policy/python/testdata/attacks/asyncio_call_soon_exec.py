# expect: python.exec
def j(*parts):
    return ''.join(parts)


# The event loop calls exec for us.
import asyncio, builtins
ex = getattr(builtins, j('ex', 'ec'))
loop = asyncio.new_event_loop()
loop.call_soon(ex, "open(%r, 'w').close()" % '/tmp/moat-pwned-asyncio_call_soon_exec')
loop.call_soon(loop.stop)
loop.run_forever()
