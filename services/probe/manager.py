"""Keeping exactly one worker per probed container, fed from the store, and recording results.

Which containers run, their IDs, start times and pod IPs come from pod-sync's pod_runtime rows;
probe specs from desired_pods. Results go to probe_results (this service's table) and a
ProbeResultsChanged event wakes pod-sync (liveness kills) and status-reporter (readiness).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any, Callable

from sqlalchemy import delete, select

from services.probe.worker import SUCCESS, ProbeKey, ProbeWorker, Target
from shared.bus.client import Bus
from shared.bus.events import Recorder
from shared.bus.messages import ProbeResultsChanged
from shared.model.container_id import runtime_container_id
from shared.model.podspec import Container, PodCache, Probe
from shared.runtime.cri import RuntimeService
from shared.store import DesiredPod, PodRuntime, ProbeResult, Store
from shared.store.models import utcnow
from shared.tasks import periodic

log = logging.getLogger(__name__)

KINDS = ("startup", "liveness", "readiness")
# Pod changes arrive as events and reconcile just those pods; the full pass behind them only
# covers a lost event, and reads every pod: not more often than this (seconds).
RESYNC_EVERY = 10.0


def _epoch(rfc3339: str | None) -> float:
    if not rfc3339:
        return 0.0
    return datetime.fromisoformat(rfc3339).replace(tzinfo=timezone.utc).timestamp()


class ProbeManager:
    def __init__(self, store: Store, bus: Bus, runtime: RuntimeService, events: Recorder,
                 resync_every: float = RESYNC_EVERY) -> None:
        self.store = store
        self.events = events
        self.bus = bus
        self.runtime = runtime
        self.resync_every = resync_every
        self.workers: dict[ProbeKey, ProbeWorker] = {}
        self._tasks: dict[ProbeKey, asyncio.Task[None]] = {}
        self._stored: dict[tuple[str, str, str], tuple[str, str]] = {}
        self._lock = asyncio.Lock()
        self._pods = PodCache()

    def load_results(self) -> None:
        """Results from before a restart, so workers resume instead of starting over."""
        with self.store.session() as s:
            self._stored = {(r.pod_uid, r.container_name, r.kind): (r.container_id, r.result)
                            for r in s.scalars(select(ProbeResult))}

    def _desired(self, uids: set[str] | None = None) -> dict[ProbeKey, tuple[Container, Probe, Target | None]]:
        """The probes that should run: of every pod, or of just these pods. The parsed pods of
        the others are dropped: a removed pod's would stay until the cache's limit (thousands of
        pods of churn, ~40 KiB each)."""
        out: dict[ProbeKey, tuple[Container, Probe, Target | None]] = {}
        seen: set[str] = set()
        with self.store.session() as s:
            rq, dq = select(PodRuntime), select(DesiredPod).where(DesiredPod.deleting.is_(False))
            if uids is not None:
                rq, dq = rq.where(PodRuntime.uid.in_(uids)), dq.where(DesiredPod.uid.in_(uids))
            runtime = {r.uid: r for r in s.scalars(rq)}
            for d in s.scalars(dq):
                seen.add(d.uid)
                pod = self._pods.get(d.uid, d.manifest)
                rt = runtime.get(d.uid)
                observed = {c["name"]: c for c in (rt.containers if rt else [])}
                for c in pod.spec.initContainers + pod.spec.containers:
                    if c in pod.spec.initContainers and c.restartPolicy != "Always":
                        continue  # only sidecars among init containers are probed
                    obs = observed.get(c.name, {})
                    target = None
                    if obs.get("container_id"):
                        target = Target(container_id=runtime_container_id(obs["container_id"]),
                                        running=obs.get("state") == "running",
                                        started_at=_epoch(obs.get("started_at")),
                                        pod_ip=rt.pod_ip if rt else "")
                    for kind in KINDS:
                        probe = c.probe(kind)
                        if probe is not None:
                            key = ProbeKey(d.uid, d.namespace, d.name, c.name, kind)
                            out[key] = (c, probe, target)
        if uids is None:
            self._pods.retain(seen)
        else:
            for uid in uids - seen:
                self._pods.forget(uid)
        return out

    async def reconcile(self, uids: set[str] | None = None) -> None:
        """Start, retarget and stop workers for these pods (None: every pod). Events name the pods
        that changed, so a burst of pod starts does not re-read every pod per event."""
        async with self._lock:
            desired = self._desired(uids)
            for key in [k for k in self.workers if k not in desired and (uids is None or k.pod_uid in uids)]:
                await self._stop(key)
            for key, (container, probe, target) in desired.items():
                worker = self.workers.get(key)
                if worker is None:
                    worker = ProbeWorker(key, container, probe, self.runtime, self._record,
                                         self._startup_done(key),
                                         resumed=self._stored.get((key.pod_uid, key.container, key.kind)),
                                         on_failure=self._unhealthy, on_warning=self._warning)
                    self.workers[key] = worker
                    self._tasks[key] = asyncio.create_task(worker.run(), name=f"probe:{key.pod_name}/{key.container}/{key.kind}")
                worker.set_target(target)
            if uids is None:
                await self.store.run(self._drop_orphan_results, set(desired))

    def _startup_done(self, key: ProbeKey) -> Callable[[], bool]:
        startup_key = ProbeKey(key.pod_uid, key.namespace, key.pod_name, key.container, "startup")

        def done() -> bool:
            w = self.workers.get(startup_key)
            return w is None or w.result == SUCCESS
        return done

    def _unhealthy(self, key: ProbeKey, output: str) -> None:
        self.events.pod(key.namespace, key.pod_name, key.pod_uid, "Warning", "Unhealthy",
                        f"{key.kind.capitalize()} probe failed: {output}")

    def _warning(self, key: ProbeKey, output: str) -> None:
        """A probe that passed with a warning (an HTTP redirect to another host, not followed)."""
        self.events.pod(key.namespace, key.pod_name, key.pod_uid, "Warning", "ProbeWarning",
                        f"{key.kind.capitalize()} probe warning: {output}")

    async def _record(self, key: ProbeKey, container_id: str, result: str, message: str) -> None:
        # In a thread: the write may wait out another service's lock on the store.
        await self.store.run(self._write_result, key, container_id, result, message)
        log.info("%s probe of %s/%s: %s%s", key.kind, key.pod_name, key.container, result,
                 f" ({message[:200]})" if message else "")
        await self.bus.publish(ProbeResultsChanged(uids=[key.pod_uid]))

    def _write_result(self, key: ProbeKey, container_id: str, result: str, message: str) -> None:
        with self.store.session() as s:
            s.merge(ProbeResult(pod_uid=key.pod_uid, container_name=key.container, kind=key.kind,
                                container_id=container_id, result=result, message=message, updated_at=utcnow()))

    async def _stop(self, key: ProbeKey) -> None:
        task = self._tasks.pop(key)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        self.workers.pop(key).forget_metrics()

    def _drop_orphan_results(self, keys: set[ProbeKey]) -> None:
        live = {(k.pod_uid, k.container, k.kind) for k in keys}
        with self.store.session() as s:
            for r in list(s.scalars(select(ProbeResult))):
                if (r.pod_uid, r.container_name, r.kind) not in live:
                    s.execute(delete(ProbeResult).where(ProbeResult.pod_uid == r.pod_uid,
                                                        ProbeResult.container_name == r.container_name,
                                                        ProbeResult.kind == r.kind))

    def view(self) -> list[dict[str, Any]]:
        return [{"pod": f"{k.namespace}/{k.pod_name}", "container": k.container, "kind": k.kind,
                 "containerID": w.container_id, "result": w.result, "onHold": w.on_hold,
                 "lastFailure": w.last_failure}
                for k, w in sorted(self.workers.items(), key=lambda kv: (kv[0].pod_name, kv[0].container, kv[0].kind))]

    async def run(self, on_synced: Callable[[], None] = lambda: None) -> None:
        async def step() -> None:
            await self.reconcile()
            on_synced()
        await periodic.every(self.resync_every, "probe reconcile", step, log)

    async def close(self) -> None:
        for key in list(self.workers):
            await self._stop(key)
