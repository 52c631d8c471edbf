"""This node's pods as the kubelet API sees them: the /pods list, and finding one pod and one of
its containers by the names a request carries (read from the store, never written)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from services.node_api.http import HTTPError
from shared.model.container_id import runtime_container_id
from shared.store import DesiredPod, PodRuntime, PodStatusRecord, Store
from shared.store.observed import ObservedContainer


def pod_list(store: Store) -> dict[str, Any]:
    with store.session() as s:
        statuses = {r.uid: r.status for r in s.scalars(select(PodStatusRecord))}
        items = []
        for d in s.scalars(select(DesiredPod)):
            pod = dict(d.manifest)
            pod["status"] = statuses.get(d.uid, {"phase": "Pending"})
            items.append(pod)
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


@dataclass
class PodRef:
    uid: str
    namespace: str
    name: str
    manifest: dict[str, Any]
    sandbox_id: str
    sandbox_ready: bool
    log_dir: str
    containers: list[ObservedContainer]  # pod-sync's per-container entries

    def spec_container_names(self) -> list[str]:
        spec = self.manifest.get("spec", {})
        return [c.get("name", "") for key in ("initContainers", "containers", "ephemeralContainers")
                for c in spec.get(key) or []]

    def container(self, name: str) -> ObservedContainer | None:
        return next((c for c in self.containers if c.get("name") == name), None)

    def running_container_id(self, name: str) -> str:
        """The runtime ID of the named container's running instance, or the kubelet's 404."""
        entry = self.container(name)
        if entry is None or entry.get("state") != "running" or not entry.get("container_id"):
            raise HTTPError(404, f'container not found ("{name}")')
        return runtime_container_id(entry["container_id"])


def find_pod(store: Store, namespace: str, name: str, uid: str | None = None) -> PodRef:
    with store.session() as s:
        pod = s.scalars(select(DesiredPod).where(DesiredPod.namespace == namespace,
                                                 DesiredPod.name == name)).first()
        if pod is None or (uid and pod.uid != uid):
            raise HTTPError(404, f'pod "{name}" does not exist')
        rt = s.get(PodRuntime, pod.uid)
        return PodRef(pod.uid, pod.namespace, pod.name, pod.manifest,
                      rt.sandbox_id if rt else "", bool(rt and rt.sandbox_ready),
                      rt.log_dir if rt else "", list(rt.containers) if rt else [])
