# result: [0, 10, 20]
import asyncio


async def fetch(i, delay):
    await asyncio.sleep(delay)
    return i * 10


async def main():
    results = await asyncio.gather(*(fetch(i, 0.001 * (3 - i)) for i in range(3)))
    q = asyncio.Queue()
    for x in results:
        await q.put(x)
    return [await q.get() for _ in range(q.qsize())]

asyncio.run(main())
