import asyncio

from services.pod_sync.syncer import SyncResult
from services.pod_sync.workers import PodWorkers


async def test_syncs_of_one_pod_never_overlap_and_coalesce():
    running = 0
    overlaps = 0
    calls = []

    async def sync(uid, reason):
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

    async def sync(uid, reason):
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


async def test_the_strongest_reason_of_the_requests_folded_into_a_sync_is_the_one_given():
    reasons = []
    gate = asyncio.Event()

    async def sync(uid, reason):
        reasons.append(reason)
        await gate.wait()
        return SyncResult()

    w = PodWorkers(sync)
    w.update("a", "sync")
    await asyncio.sleep(0.05)  # the first sync runs, held at the gate
    w.update("a", "sync")
    w.update("a", "update")  # folds with the queued periodic one: an update
    w.update("a", "sync")
    gate.set()
    await asyncio.sleep(0.1)
    w.update("a", "sync")
    await asyncio.sleep(0.1)
    assert reasons == ["sync", "update", "sync"]
    await w.close()


async def test_each_pod_sync_is_counted_under_the_kubelets_operation_type(syncer, store):
    """kubelet_pod_worker_duration_seconds: a pod's first sync is "create", a change "update",
    a periodic one "sync", and one after the pod is no longer wanted "kill"."""
    from services.pod_sync.manager import PodSyncManager
    from services.pod_sync.metrics import POD_WORKER_DURATION
    from shared.store import DesiredPod
    from tests.unit.test_syncer import manifest, want

    class Bus:
        async def publish(self, _event) -> None:
            return None

    def count(operation: str) -> float:
        POD_WORKER_DURATION.labels(operation_type=operation)  # a series for each, even if 0
        return next(s.value for m in POD_WORKER_DURATION.collect() for s in m.samples
                    if s.name.endswith("_count") and s.labels["operation_type"] == operation)

    manager = PodSyncManager(syncer, [], Bus(), resync_every=60)
    want(store, manifest())
    before = {op: count(op) for op in ("create", "update", "sync", "kill")}
    for reason in ("update", "sync", "update", "sync"):
        await manager._sync("uid1", reason)
    with store.session() as s:
        s.delete(s.get(DesiredPod, "uid1"))
    await manager._sync("uid1", "update")
    assert {op: count(op) - before[op] for op in before} == {"create": 1, "update": 1, "sync": 2, "kill": 1}
    await manager.close()
