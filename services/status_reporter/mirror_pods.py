"""Mirror pods: the API's read-only copy of each static pod, so the cluster sees it.

Created with the kubelet's annotation (kubernetes.io/config.mirror = the static pod's hash) and
owned by the Node; recreated when someone deletes it or the static pod changes; deleted with the
static pod; its status follows the static pod's.

Synced when something it depends on changes: a static pod (its desired state or status, from the
bus) or a mirror pod in the API (pod-sync's watch of the node's pods sees those and says so), and
every RESYNC_PERIOD in case a wake-up was lost. A sync lists the node's pods, so it is not run on
a short timer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from sqlalchemy import select

from services.status_reporter.pod_status import with_host_ips
from shared.api.client import ApiError, KubeApi, patch_pod_status, path
from shared.model.pod_status import PodStatus
from shared.store import STATIC_SOURCES, DesiredPod, PodStatusRecord, Store
from shared.tasks.coalesce import Coalescer

log = logging.getLogger(__name__)

MIRROR = "kubernetes.io/config.mirror"
CONFIG_HASH = "kubernetes.io/config.hash"
RESYNC_PERIOD = 60.0  # the longest a lost wake-up delays a mirror pod change (the kubelet's syncFrequency)
REGISTRATION_POLL = 1.0  # mirror pods are owned by the Node: none before it is registered


def mirror_body(manifest: dict[str, Any], node_name: str, node_uid: str) -> dict[str, Any]:
    meta = manifest["metadata"]
    annotations = {**meta.get("annotations", {}), MIRROR: meta["annotations"].get(CONFIG_HASH, meta["uid"])}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace", "default"),
                         "labels": meta.get("labels", {}), "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_name,
                                              "uid": node_uid, "controller": True}]},
            "spec": manifest["spec"]}


def _left_terminal(mirror: dict[str, Any], status: PodStatus | None) -> bool:
    """The static pod runs again after a node shutdown stopped it, and its mirror says Failed: the
    API server lets no pod leave a terminal phase, so the mirror is made anew."""
    return (mirror.get("status", {}).get("phase") in ("Succeeded", "Failed") and status is not None
            and status["phase"] not in ("Succeeded", "Failed"))


class MirrorPods:
    def __init__(self, api: KubeApi, store: Store, node_name: str, node_uid: Callable[[], str], host_ip: str) -> None:
        self.api = api
        self.store = store
        self.node_name = node_name
        self.node_uid = node_uid  # callable: the Node's UID once registered
        self.host_ip = host_ip
        self._lock = asyncio.Lock()
        self._static: set[str] = set()  # static pod uids at the last sync
        self._failing = False

    async def _existing(self) -> dict[tuple[str, str], dict[str, Any]]:
        items, _ = await self.api.list(path("v1", "pods"), fieldSelector=f"spec.nodeName={self.node_name}")
        return {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in items
                if MIRROR in (p["metadata"].get("annotations") or {})}

    async def on_pods(self, uids: set[str] | None) -> None:
        """A coalesced wake-up: these pods changed (None: a mirror pod did, or it is time to
        resync). Pods that are not static need no sync."""
        if uids is not None and not self._concern_static(uids):
            return
        try:
            await self.sync()
        except Exception as exc:  # the next wake-up or resync tries again; pods keep running
            if not self._failing:
                log.warning("mirror pod sync failed (%s); retrying at the next change or in %.0fs",
                            exc or type(exc).__name__, RESYNC_PERIOD)
            self._failing = True
            return
        if self._failing:
            log.info("mirror pod sync works again")
        self._failing = False

    def _concern_static(self, uids: set[str]) -> bool:
        if uids & self._static:
            return True
        with self.store.session() as s:
            return s.scalar(select(DesiredPod.uid).where(DesiredPod.uid.in_(uids),
                                                         DesiredPod.source.in_(STATIC_SOURCES)).limit(1)) is not None

    async def sync(self) -> None:
        if not self.node_uid():
            return
        async with self._lock:
            with self.store.session() as s:
                static = [d for d in s.scalars(select(DesiredPod).where(DesiredPod.source.in_(STATIC_SOURCES),
                                                                        DesiredPod.deleting.is_(False)))]
                statuses = {r.uid: r.status for r in s.scalars(select(PodStatusRecord))}
            self._static = {d.uid for d in static}
            existing = await self._existing()
            wanted = {(d.namespace, d.name): d for d in static}
            for key, mirror in existing.items():
                d = wanted.get(key)
                # Someone deleted it (graceful: the node finishes that) or it is out of date.
                if d is None or mirror["metadata"]["annotations"][MIRROR] != d.uid \
                        or mirror["metadata"].get("deletionTimestamp") \
                        or _left_terminal(mirror, statuses.get(d.uid)):
                    await self._delete(mirror)
                    if d is not None:
                        await self._create(d)
                    continue
                await self._status(mirror, statuses.get(d.uid))
            for key, d in wanted.items():
                if key not in existing:
                    created = await self._create(d)
                    if created is not None:
                        await self._status(created, statuses.get(d.uid))

    async def _create(self, d: DesiredPod) -> dict[str, Any] | None:
        try:
            pod = await self.api.create(path("v1", "pods", namespace=d.namespace),
                                        mirror_body(d.manifest, self.node_name, self.node_uid()))
            log.info("mirror pod %s/%s created", d.namespace, d.name)
            return {"metadata": {k: pod["metadata"][k] for k in ("name", "namespace", "uid")}}
        except ApiError as exc:
            if exc.status == 409:
                return None
            log.warning("mirror pod %s/%s not created: %s %s", d.namespace, d.name, exc.status, exc.reason)
            return None

    async def _delete(self, mirror: dict[str, Any]) -> None:
        m = mirror["metadata"]
        try:
            await self.api.delete(path("v1", "pods", m["name"], m["namespace"]), grace_period=0, uid=m["uid"])
            log.info("mirror pod %s/%s deleted", m["namespace"], m["name"])
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    async def _status(self, mirror: dict[str, Any], status: PodStatus | None) -> None:
        if not status:
            return
        m = mirror["metadata"]
        if mirror.get("status", {}).get("phase") == status["phase"] and \
                mirror.get("status", {}).get("containerStatuses") == status.get("containerStatuses"):
            return
        await patch_pod_status(self.api, m["namespace"], m["name"], m["uid"], with_host_ips(status, self.host_ip))

    async def run(self, changes: Coalescer) -> None:
        """The first sync once the Node is registered, then a resync every RESYNC_PERIOD;
        changes (fed by the bus) runs on_pods."""
        while not self.node_uid():
            await asyncio.sleep(REGISTRATION_POLL)
        while True:
            changes.add(None)
            await asyncio.sleep(RESYNC_PERIOD)
