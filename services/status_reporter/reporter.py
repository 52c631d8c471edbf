"""Keeping the pod_status table in line with desired pods and their runtime observations."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, cast

from sqlalchemy import delete, select
from sqlalchemy.engine import CursorResult

from services.status_reporter.pod_status import compute_status
from shared.bus.client import Bus
from shared.bus.messages import PodStatusChanged
from shared.model.podspec import PodCache
from shared.store import DesiredPod, PodRuntime, PodStatusRecord, ProbeResult, Store
from shared.store.models import NodeHealth, utcnow
from shared.store.runtime_status import default_handler_makes_rro_mounts

log = logging.getLogger(__name__)


class PodStatusReporter:
    def __init__(self, store: Store, bus: Bus, resync_every: float = 10.0) -> None:
        self.store = store
        self.bus = bus
        self.resync_every = resync_every
        self._pods = PodCache()

    async def _refresh(self, uids: list[str] | None = None) -> list[str]:
        # On the store's thread: a write may wait out another service's lock on the store, which
        # must not hold the event loop; refreshes run there one at a time.
        return await self.store.run(self.refresh, uids)

    def refresh(self, uids: list[str] | None = None) -> list[str]:
        """Recompute the status of these pods (all when None); return the UIDs that changed."""
        changed = []
        with self.store.session() as s:
            q = select(DesiredPod)
            if uids is not None:
                q = q.where(DesiredPod.uid.in_(uids))
            desired = {d.uid: d for d in s.scalars(q)}
            # Parsed pods are kept only while they are on the node: a removed pod's would stay
            # until the cache's limit (thousands of pods of churn, ~40 KiB each).
            if uids is None:
                self._pods.retain(set(desired))
            else:
                for uid in set(uids) - set(desired):
                    self._pods.forget(uid)
            runtime = {r.uid: r for r in s.scalars(select(PodRuntime).where(PodRuntime.uid.in_(desired)))}
            rro = default_handler_makes_rro_mounts(s.get(NodeHealth, 1))
            records = {r.uid: r for r in s.scalars(select(PodStatusRecord).where(PodStatusRecord.uid.in_(desired)))}
            probes: dict[str, dict[tuple[str, str], tuple[str, str]]] = {}
            for r in s.scalars(select(ProbeResult).where(ProbeResult.pod_uid.in_(desired))):
                probes.setdefault(r.pod_uid, {})[(r.container_name, r.kind)] = (r.container_id, r.result)
            for uid, d in desired.items():
                rt = runtime.get(uid)
                rt_dict = None if rt is None else {
                    "sandbox_ready": rt.sandbox_ready, "pod_ip": rt.pod_ip, "containers": rt.containers,
                    "sync_error_reason": rt.sync_error_reason, "sync_error_message": rt.sync_error_message,
                    "observed_generation": rt.observed_generation, "resize_conditions": rt.resize_conditions,
                    "pod_resources": rt.pod_resources}
                prev = records.get(uid)
                try:
                    status, summary = compute_status(self._pods.get(uid, d.manifest), rt_dict,
                                                     prev.status if prev else None, deleting=d.deleting,
                                                     rejection=(d.rejection_reason, d.rejection_message),
                                                     probes=probes.get(uid), rro_supported=rro)
                except Exception:
                    # One pod's bad data must not stop every other pod's status.
                    log.exception("cannot compute the status of pod %s/%s", d.namespace, d.name)
                    continue
                if prev is not None and prev.status == status and prev.summary == summary:
                    continue
                s.merge(PodStatusRecord(uid=uid, namespace=d.namespace, name=d.name, source=d.source,
                                        phase=status["phase"], pod_ip=status.get("podIP") or "",
                                        status=status, summary=summary, updated_at=utcnow()))
                changed.append(uid)
            # Pods no longer desired at all have no status any more.
            gone_q = delete(PodStatusRecord).where(PodStatusRecord.uid.not_in(select(DesiredPod.uid)))
            if uids is not None:
                gone_q = gone_q.where(PodStatusRecord.uid.in_(uids))
            if cast("CursorResult[Any]", s.execute(gone_q)).rowcount:  # a DELETE's result counts rows
                changed.extend(u for u in (uids or []) if u not in desired)
        return changed

    async def on_pods(self, uids: list[str] | None) -> None:
        changed = await self._refresh(uids)
        if changed:
            await self.bus.publish(PodStatusChanged(uids=changed))

    async def run_resync(self, on_synced: Callable[[], None] = lambda: None) -> None:
        while True:
            try:
                changed = await self._refresh()
                if changed:
                    await self.bus.publish(PodStatusChanged(uids=changed))
                on_synced()
            except Exception:
                log.exception("pod status resync failed")
            await asyncio.sleep(self.resync_every)

