"""Writing API pods' status (status subresource) and deleting the API objects of pods that have
finished terminating. Only this service writes to the API server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from sqlalchemy import select

from services.status_reporter.pod_status import with_host_ips
from shared.api.client import ApiError, KubeApi, patch_pod_status, path
from shared.model.pod_status import PodStatus
from shared.model.timestamps import rfc3339
from shared.store import DesiredPod, PodStatusRecord, RefusedPod, Store
from shared.tasks import periodic

log = logging.getLogger(__name__)


def refused_status(r: RefusedPod) -> PodStatus:
    """A pod the node refused: Failed with why, nothing ever started (the kubelet's status for a
    pod it rejects at admission)."""
    return {"phase": "Failed", "reason": r.reason, "message": r.message, "podIP": None, "podIPs": [],
            "startTime": rfc3339(r.seen_at), "conditions": [], "containerStatuses": []}


class ApiPodStatusWriter:
    def __init__(self, api: KubeApi, store: Store, host_ip: str, resync_every: float = 10.0) -> None:
        self.api = api
        self.store = store
        self.resync_every = resync_every
        self.host_ip = host_ip
        self._sent: dict[str, PodStatus] = {}  # uid -> last status the API accepted
        self._lock = asyncio.Lock()  # one pass at a time: an older status never overtakes a newer

    def _work(self, uids: list[str] | None) -> tuple[list[Any], list[Any]]:
        with self.store.session() as s:
            q = select(DesiredPod).where(DesiredPod.source == "api")
            rq = select(RefusedPod)
            if uids is not None:
                q = q.where(DesiredPod.uid.in_(uids))
                rq = rq.where(RefusedPod.uid.in_(uids))
            pods = list(s.scalars(q))
            refused = list(s.scalars(rq))
            statuses = {r.uid: r.status for r in s.scalars(
                select(PodStatusRecord).where(PodStatusRecord.uid.in_([p.uid for p in pods])))}
        finished = [p for p in pods if p.terminated and not p.api_deleted] + [r for r in refused if r.deleting]
        updates: list[tuple[DesiredPod | RefusedPod, PodStatus]] = [
            (p, statuses[p.uid]) for p in pods if not p.terminated and p.uid in statuses]
        updates += [(r, refused_status(r)) for r in refused if not r.deleting]
        return finished, updates

    async def sync(self, uids: list[str] | None = None) -> None:
        async with self._lock:
            finished, updates = self._work(uids)
            for pod, status in updates:
                await self._patch(pod, status)
            for pod in finished:
                await self._delete(pod)

    async def _patch(self, pod: DesiredPod | RefusedPod, status: PodStatus) -> None:
        status = with_host_ips(status, self.host_ip)
        if self._sent.get(pod.uid) == status:
            return
        if await patch_pod_status(self.api, pod.namespace, pod.name, pod.uid, status):
            self._sent[pod.uid] = status
        else:
            self._sent.pop(pod.uid, None)

    async def _delete(self, pod: DesiredPod | RefusedPod) -> None:
        """Nothing of the pod runs any more: remove it for good (grace 0, only this UID)."""
        try:
            await self.api.delete(path("v1", "pods", pod.name, pod.namespace), grace_period=0, uid=pod.uid)
            log.info("pod %s/%s terminated; deleted from the API", pod.namespace, pod.name)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
        self._sent.pop(pod.uid, None)

    async def run(self) -> None:
        await periodic.every(self.resync_every, "pod status update", self.sync, log)
