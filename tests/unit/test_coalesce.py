"""Many wake-up events, few passes of work."""

import asyncio

from shared.tasks.coalesce import Coalescer


async def test_events_during_a_pass_are_batched_into_the_next():
    passes: list[set[str] | None] = []
    gate = asyncio.Event()

    async def work(keys):
        passes.append(keys)
        await gate.wait()

    c = Coalescer("test", work)
    task = asyncio.create_task(c.run())
    c.add(["a"])
    await asyncio.sleep(0)
    for uid in ["b", "c", "b"]:  # arrive while the first pass runs
        c.add([uid])
    gate.set()
    await asyncio.sleep(0.01)
    assert passes == [{"a"}, {"b", "c"}]

    c.add(["d"])
    c.add(None)  # "everything" wins over a partial set
    await asyncio.sleep(0.01)
    assert passes[-1] is None and len(passes) == 3
    task.cancel()


async def test_a_failing_pass_does_not_stop_the_worker():
    seen = []

    async def work(keys):
        seen.append(keys)
        if len(seen) == 1:
            raise RuntimeError("boom")

    c = Coalescer("test", work)
    task = asyncio.create_task(c.run())
    c.add(["a"])
    await asyncio.sleep(0.01)
    c.add(["b"])
    await asyncio.sleep(0.01)
    assert seen == [{"a"}, {"b"}]
    task.cancel()
