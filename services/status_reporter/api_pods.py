"""Writing API pods' status (status subresource) and deleting the API objects of pods that have
finished terminating. Only this service writes to the API server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from sqlalchemy import select

from shared import periodic
from shared.kube import REQUEST_TIMEOUT, patch_pod_status
from shared.store import DesiredPod, PodStatusRecord, Store

log = logging.getLogger(__name__)


class ApiPodStatusWriter:
    def __init__(self, api: client.ApiClient, store: Store, host_ip: str, resync_every: float = 10.0) -> None:
        self.core = client.CoreV1Api(api)
        self.store = store
        self.resync_every = resync_every
        self.host_ip = host_ip
        self._sent: dict[str, dict[str, Any]] = {}  # uid -> last status the API accepted
        self._lock = asyncio.Lock()  # one pass at a time: an older status never overtakes a newer

    def _work(self, uids: list[str] | None) -> tuple[list, list]:
        with self.store.session() as s:
            q = select(DesiredPod).where(DesiredPod.source == "api")
            if uids is not None:
                q = q.where(DesiredPod.uid.in_(uids))
            pods = list(s.scalars(q))
            statuses = {r.uid: r.status for r in s.scalars(
                select(PodStatusRecord).where(PodStatusRecord.uid.in_([p.uid for p in pods])))}
        finished = [p for p in pods if p.terminated and not p.api_deleted]
        updates = [(p, statuses[p.uid]) for p in pods if not p.terminated and p.uid in statuses]
        return finished, updates

    async def sync(self, uids: list[str] | None = None) -> None:
        async with self._lock:
            finished, updates = self._work(uids)
            for pod, status in updates:
                await self._patch(pod, status)
            for pod in finished:
                await self._delete(pod)

    async def _patch(self, pod: DesiredPod, status: dict[str, Any]) -> None:
        status = {**status, "hostIP": self.host_ip}
        if self._sent.get(pod.uid) == status:
            return
        if await patch_pod_status(self.core, pod.namespace, pod.name, pod.uid, status):
            self._sent[pod.uid] = status
        else:
            self._sent.pop(pod.uid, None)

    async def _delete(self, pod: DesiredPod) -> None:
        """Nothing of the pod runs any more: remove it for good (grace 0, only this UID)."""
        try:
            await self.core.delete_namespaced_pod(
                pod.name, pod.namespace, body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.uid)),
                _request_timeout=REQUEST_TIMEOUT)
            log.info("pod %s/%s terminated; deleted from the API", pod.namespace, pod.name)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        self._sent.pop(pod.uid, None)

    async def run(self) -> None:
        await periodic.every(self.resync_every, "pod status update", self.sync, log)
