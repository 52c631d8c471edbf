"""syncFrequency and fileCheckFrequency: the periods of pod-sync's full resync and of the static
pod directory's rescan, the nets under lost events."""

from __future__ import annotations

import asyncio

import pytest

from services.pod_sync import static_source
from services.pod_sync.manager import PodSyncManager
from services.pod_sync.static_source import StaticPodSource
from shared.config.settings import load_kubelet_config
from shared.tasks.dir_watch import Change


class DeafWatch:
    """A directory watch that misses every change, as a lost inotify event would."""

    def __init__(self, *_a, **_kw) -> None:
        pass

    async def __aenter__(self) -> DeafWatch:
        return self

    async def __aexit__(self, *_exc) -> None:
        return None

    async def next_change(self, timeout: float) -> Change:
        await asyncio.sleep(timeout)
        return Change.TIMEOUT


POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: c, image: 'reg/web:1'}]\n"


@pytest.mark.parametrize("period,found", [("1s", True), ("1h", False)])
async def test_file_check_frequency_finds_a_manifest_no_event_announced(tmp_path, store, monkeypatch, period, found):
    k, _ = load_kubelet_config({"fileCheckFrequency": period})
    monkeypatch.setattr(static_source, "DirectoryWatch", DeafWatch)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    seen: list[set[str]] = []

    async def on_change(uids: set[str]) -> None:
        seen.append(uids)
    source = StaticPodSource(str(manifests), "node1", store, k.file_check_frequency, on_change=on_change)
    task = asyncio.create_task(source.run(), name="static-source")
    try:
        await asyncio.wait_for(source.synced.wait(), 10)
        (manifests / "web.yaml").write_text(POD)
        for _ in range(40):  # 4 s: four periods of 1s, nothing near one of 1h
            if seen:
                break
            await asyncio.sleep(0.1)
        assert bool(seen) is found, f"fileCheckFrequency {period}"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_sync_frequency_is_the_wait_between_full_resyncs(syncer, monkeypatch):
    k, _ = load_kubelet_config({"syncFrequency": "45s"})
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        raise asyncio.CancelledError  # one round is enough

    class Bus:
        async def publish(self, _event) -> None:
            return None
    manager = PodSyncManager(syncer, [], Bus(), resync_every=k.sync_frequency)
    monkeypatch.setattr("services.pod_sync.manager.asyncio.sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        await manager.run_resync()
    assert waits == [45.0]
