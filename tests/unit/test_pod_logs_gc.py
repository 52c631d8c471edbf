"""A deleted pod's log directory goes a while after the pod, as the kubelet's container GC does."""

from __future__ import annotations

import os
import time

from services.pod_sync.pod_logs_gc import MIN_AGE, PodLogsGC
from tests.unit.test_syncer import manifest, want


def _log_dir(root, name):
    d = root / name / "app"
    d.mkdir(parents=True)
    (d / "0.log").write_text("last words\n")
    old = time.time() - MIN_AGE - 5
    for p in (d / "0.log", d, d.parent):
        os.utime(p, (old, old))
    return d.parent


async def test_only_logs_of_gone_pods_past_the_delay_are_removed(rt, store, tmp_path):
    logs = tmp_path / "logs"
    want(store, manifest(uid="wanted"))
    kept = _log_dir(logs, "default_p_wanted")
    gone = _log_dir(logs, "default_old_gone1")
    fresh = _log_dir(logs, "default_new_gone2")
    (fresh / "app" / "0.log").write_text("just now\n")
    stranger = _log_dir(logs, "not-a-pod-dir")
    gc = PodLogsGC(rt, store, str(logs))
    assert await gc.collect() == ["default_old_gone1"]
    assert kept.exists() and fresh.exists() and stranger.exists() and not gone.exists()
    assert await gc.collect(now=time.time() + MIN_AGE + 1) == ["default_new_gone2"]


async def test_a_pod_whose_sandbox_is_still_there_keeps_its_logs(rt, store, tmp_path, syncer):
    want(store, manifest(uid="uid1"))
    await syncer.sync("uid1")
    with store.session() as s:
        from shared.store import DesiredPod
        s.delete(s.get(DesiredPod, "uid1"))
    logs = tmp_path / "logs"
    d = _log_dir(logs, "default_p_uid1")
    assert await PodLogsGC(rt, store, str(logs)).collect() == []
    assert d.exists(), "the runtime still has its sandbox"


async def test_no_logs_dir_is_nothing_to_do(rt, store, tmp_path):
    assert await PodLogsGC(rt, store, str(tmp_path / "none")).collect() == []
