import gzip

from services.pod_sync.log_rotation import ContainerLogRotator
from shared.cri.fake import FakeRuntime
from cri_api.v1 import api_pb2 as cri


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
