"""The kubelet's /pods view: a v1 PodList of this node's pods with their current status."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from shared.store import DesiredPod, PodStatusRecord, Store


def pod_list(store: Store) -> dict[str, Any]:
    with store.session() as s:
        statuses = {r.uid: r.status for r in s.scalars(select(PodStatusRecord))}
        items = []
        for d in s.scalars(select(DesiredPod)):
            pod = dict(d.manifest)
            pod["status"] = statuses.get(d.uid, {"phase": "Pending"})
            items.append(pod)
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
