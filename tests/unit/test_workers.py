import asyncio

from services.pod_sync.syncer import SyncResult
from services.pod_sync.workers import PodWorkers


async def test_syncs_of_one_pod_never_overlap_and_coalesce():
    running = 0
    overlaps = 0
    calls = []

    async def sync(uid):
        nonlocal running, overlaps
        running += 1
        overlaps += running > 1
        calls.append(uid)
        await asyncio.sleep(0.05)
        running -= 1
        return SyncResult()

    w = PodWorkers(sync)
    for _ in range(10):
        w.update("a")
    await asyncio.sleep(0.3)
    assert overlaps == 0
    assert 1 <= len(calls) <= 2  # ten requests while busy fold into at most one more sync
    await w.close()


async def test_failed_sync_is_retried_and_requeue_honoured(monkeypatch):
    import services.pod_sync.workers as workers_mod

    monkeypatch.setattr(workers_mod, "ERROR_RETRY", 0.05)
    attempts = []

    async def sync(uid):
        attempts.append(uid)
        if len(attempts) == 1:
            raise RuntimeError("runtime hiccup")
        if len(attempts) == 2:
            return SyncResult(requeue_after=0.05)
        return SyncResult()

    w = PodWorkers(sync)
    w.update("a")
    await asyncio.sleep(0.4)
    assert len(attempts) == 3
    await w.close()
