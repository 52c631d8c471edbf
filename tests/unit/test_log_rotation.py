import gzip

from cri_api.v1 import api_pb2 as cri

from services.pod_sync.log_rotation import ContainerLogRotator
from shared.runtime.cri.fake import FakeRuntime


async def _container(rt):
    sid = await rt.run_pod_sandbox(cri.PodSandboxConfig(metadata=cri.PodSandboxMetadata(name="p")))
    cid = await rt.create_container(sid, cri.ContainerConfig(metadata=cri.ContainerMetadata(name="c"),
                                                             image=cri.ImageSpec(image="i:1")), None)
    return cid


async def test_rotation_keeps_max_files_and_compresses_older(tmp_path, monkeypatch):
    rt = FakeRuntime(images=["i:1"])
    cid = await _container(rt)
    log = tmp_path / "0.log"
    rotator = ContainerLogRotator(rt, max_size=100, max_files=3)
    stamps = iter(f"2026010{i}-000000" for i in range(1, 9))
    monkeypatch.setattr("services.pod_sync.log_rotation.time.strftime", lambda *a: next(stamps))
    for round_ in range(4):
        log.write_text(f"round {round_} " + "x" * 200)
        assert await rotator.rotate_if_needed(cid, log)
    files = sorted(p.name for p in tmp_path.iterdir())
    # current file is reopened by the runtime (here: absent) + max_files-1 rotated ones
    assert files == ["0.log.20260103-000000.gz", "0.log.20260104-000000"]
    assert gzip.open(tmp_path / "0.log.20260103-000000.gz").read().startswith(b"round 2")
    assert [op for op, _ in rt.ops("reopen_container_log")] == ["reopen_container_log"] * 4


async def test_small_logs_are_left_alone(tmp_path):
    rt = FakeRuntime(images=["i:1"])
    cid = await _container(rt)
    log = tmp_path / "0.log"
    log.write_text("short")
    assert not await ContainerLogRotator(rt, 100, 3).rotate_if_needed(cid, log)
    assert rt.ops("reopen_container_log") == []


class CountingStatus(FakeRuntime):
    """Keeps each ContainerStatus call open a moment and counts how many are open at once."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.open = self.peak = 0

    async def container_status(self, container_id):
        import asyncio

        self.open += 1
        self.peak = max(self.peak, self.open)
        await asyncio.sleep(0.05)
        self.open -= 1
        return await super().container_status(container_id)


async def _running(rt, tmp_path, n):
    for i in range(n):
        sid = await rt.run_pod_sandbox(cri.PodSandboxConfig(metadata=cri.PodSandboxMetadata(name=f"p{i}")))
        cid = await rt.create_container(sid, cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="c"), image=cri.ImageSpec(image="i:1"),
            labels={"pykubelet.io/managed": "true"}, log_path=str(tmp_path / f"{i}.log")), None)
        await rt.start_container(cid)
        (tmp_path / f"{i}.log").write_text("x" * 200)


async def test_container_log_max_workers_rotates_that_many_at_once(tmp_path):
    for workers, peak in ((1, 1), (3, 3)):
        rt = CountingStatus(images=["i:1"])
        logs = tmp_path / str(workers)
        logs.mkdir()
        await _running(rt, logs, 6)
        assert await ContainerLogRotator(rt, 100, 3, workers=workers).rotate_all() == 6
        assert rt.peak == peak, f"containerLogMaxWorkers {workers}"


async def test_container_log_monitor_interval_is_the_wait_between_checks(monkeypatch):
    import asyncio

    from shared.config.settings import load_kubelet_config
    waits = []

    async def sleep(seconds):
        waits.append(seconds)
        raise asyncio.CancelledError  # one round is enough

    k, _ = load_kubelet_config({"containerLogMonitorInterval": "3s"})
    rotator = ContainerLogRotator(FakeRuntime(), 100, 3, interval=k.container_log_monitor_interval)
    monkeypatch.setattr("services.pod_sync.log_rotation.asyncio.sleep", sleep)
    try:
        await rotator.run()
    except asyncio.CancelledError:
        pass
    assert waits == [3.0]


class StatusCalls(FakeRuntime):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.asked: list[str] = []

    async def container_status(self, container_id):
        self.asked.append(container_id)
        return await super().container_status(container_id)


async def test_a_containers_log_path_is_asked_once_and_forgotten_when_it_stops(tmp_path):
    rt = StatusCalls(images=["i:1"])
    await _running(rt, tmp_path, 2)
    rotator = ContainerLogRotator(rt, 100, 3)
    assert await rotator.rotate_all() == 2
    first = sorted(rt.asked)
    (tmp_path / "0.log").write_text("x" * 200)  # grew again after the rotation
    assert await rotator.rotate_all() == 1  # the path the runtime gave is still watched
    assert sorted(rt.asked) == first  # without asking the runtime again
    await rt.stop_container(first[0], 0)
    await rotator.rotate_all()
    assert list(rotator._log_paths) == [first[1]]
