"""The probe service's manager against a real store file: which pods' parsed specs it keeps."""

from __future__ import annotations

from sqlalchemy import delete

from services.probe.manager import ProbeManager
from shared.store import DesiredPod, Store


def _manifest(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]}}


async def test_the_parsed_pods_of_removed_pods_are_not_kept(tmp_path):
    """Every pod on the node is parsed to find its probes; a removed pod's parsed spec goes with
    it, from the event naming it or from the periodic pass (in a churn of thousands of pods the
    cache grew by ~40 KiB a pod until its limit)."""
    writer = Store(tmp_path / "s.db", writer="pod-sync")
    writer.create_schema()
    with writer.session() as s:
        for uid in ("a", "b", "c"):
            s.add(DesiredPod(uid=uid, namespace="default", name=uid, source="file", manifest=_manifest(uid)))
    store = Store(tmp_path / "s.db", writer="probe")
    manager = ProbeManager(store, bus=None, runtime=None, events=None)  # no probes: no worker starts
    try:
        await manager.reconcile()
        assert len(manager._pods) == 3 and not manager.workers
        with writer.session() as s:
            s.execute(delete(DesiredPod).where(DesiredPod.uid == "b"))
        await manager.reconcile({"b"})
        assert "b" not in manager._pods and "a" in manager._pods
        with writer.session() as s:
            s.execute(delete(DesiredPod).where(DesiredPod.uid == "c"))
        await manager.reconcile()
        assert "c" not in manager._pods and len(manager._pods) == 1
    finally:
        store.close()
        writer.close()
