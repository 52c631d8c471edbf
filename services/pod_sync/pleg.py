"""PLEG: relist the runtime every period, wake the worker of every pod that changed, and tell
others (on the bus) which containers started, died or were removed.

Comparing full relists (not a stream of runtime events) keeps it level-triggered: a restart of
pod-sync or containerd simply means the first relist reports everything once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from cri_api.v1 import api_pb2 as cri
from prometheus_client import Gauge, Histogram

from services.pod_sync.metrics import RUNNING_CONTAINERS, RUNNING_PODS
from shared.bus.messages import ContainerEvent
from shared.runtime.cri import CRIError, RuntimeService
from shared.runtime.cri import labels as L

log = logging.getLogger(__name__)

RELIST_DURATION = Histogram("kubelet_pleg_relist_duration_seconds",
                            "Duration in seconds for relisting pods in PLEG.")
RELIST_INTERVAL = Histogram("kubelet_pleg_relist_interval_seconds",
                            "Interval in seconds between relisting in PLEG.")
LAST_SEEN = Gauge("kubelet_pleg_last_seen_seconds",
                  "Timestamp in seconds when PLEG was last seen active.")

# The kubelet calls PLEG unhealthy when a relist has not completed for 3 minutes.
UNHEALTHY_AFTER = 180.0
_STATE_NAMES = {cri.CONTAINER_CREATED: "created", cri.CONTAINER_RUNNING: "running",
                cri.CONTAINER_EXITED: "exited", cri.CONTAINER_UNKNOWN: "unknown"}


@dataclass(frozen=True)
class _Seen:
    uid: str
    name: str
    state: int


class PLEG:
    def __init__(self, runtime: RuntimeService, period: float, on_changed: Callable[[set[str]], None],
                 on_events: Callable[[list[ContainerEvent]], Awaitable[None]] | None = None) -> None:
        self.runtime = runtime
        self.period = period
        self.on_changed = on_changed
        self.on_events = on_events
        self._sandboxes: dict[str, tuple[str, int]] | None = None
        self._containers: dict[str, _Seen] = {}
        self.last_relist: float = 0.0
        self.last_error: str = ""

    def healthy(self) -> tuple[bool, str]:
        if not self.last_relist:
            return False, "PLEG has not relisted yet"
        age = time.monotonic() - self.last_relist
        if age > UNHEALTHY_AFTER:
            return False, f"PLEG is not healthy: pleg was last seen active {age:.0f}s ago"
        return True, "ok"

    async def relist(self) -> tuple[set[str], list[ContainerEvent]]:
        start = time.monotonic()
        if self.last_relist:
            RELIST_INTERVAL.observe(start - self.last_relist)
        managed = {L.MANAGED_BY: "true"}
        sandboxes, containers = await asyncio.gather(self.runtime.list_pod_sandbox(managed),
                                                     self.runtime.list_containers(managed))
        RELIST_DURATION.observe(time.monotonic() - start)
        self.last_relist = time.monotonic()
        LAST_SEEN.set(time.time())

        sb_now = {s.id: (s.labels.get(L.POD_UID, ""), int(s.state)) for s in sandboxes}
        c_now = {c.id: _Seen(c.labels.get(L.POD_UID, ""), c.metadata.name, c.state) for c in containers}
        first = self._sandboxes is None
        sb_before = self._sandboxes or {}
        changed = {uid for sid, (uid, _) in (sb_now | sb_before).items() if sb_now.get(sid) != sb_before.get(sid)}
        events: list[ContainerEvent] = []
        for cid in c_now.keys() | self._containers.keys():
            now, before = c_now.get(cid), self._containers.get(cid)
            if now == before:
                continue
            seen = now or before
            assert seen is not None  # they differ, so one of them is there
            changed.add(seen.uid)
            if not first:
                kind = _event_type(before.state if before else None, now.state if now else None)
                if kind:
                    events.append(ContainerEvent(pod_uid=seen.uid, container_id=cid,
                                                 container_name=seen.name, type=kind))
        self._sandboxes, self._containers = sb_now, c_now
        changed.discard("")
        RUNNING_PODS.set(sum(1 for _, state in sb_now.values() if state == cri.SANDBOX_READY))
        for state, name in _STATE_NAMES.items():
            RUNNING_CONTAINERS.labels(name).set(sum(1 for c in c_now.values() if c.state == state))
        return changed, events

    async def run(self) -> None:
        while True:
            try:
                changed, events = await self.relist()
                self.last_error = ""
                if changed:
                    self.on_changed(changed)
                if events and self.on_events is not None:
                    await self.on_events(events)
            except CRIError as exc:
                if str(exc) != self.last_error:
                    log.warning("PLEG relist failed: %s", exc)
                self.last_error = str(exc)
            await asyncio.sleep(self.period)


def _event_type(before: int | None, now: int | None) -> str:
    if now is None:
        return "ContainerRemoved"
    if now == cri.CONTAINER_RUNNING and before != cri.CONTAINER_RUNNING:
        return "ContainerStarted"
    if now == cri.CONTAINER_EXITED and before != cri.CONTAINER_EXITED:
        return "ContainerDied"
    return ""
