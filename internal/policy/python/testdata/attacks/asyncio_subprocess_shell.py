# expect: python.process
# asyncio is allowed; the shell it would start is not.
import asyncio


async def main():
    proc = await asyncio.create_subprocess_shell('touch /tmp/moat-pwned-asyncio_subprocess_shell')
    await proc.wait()

asyncio.run(main())
