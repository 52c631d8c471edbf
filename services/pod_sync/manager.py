"""Ties pod-sync together: sources feed desire, PLEG and timers wake workers, workers sync."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Coroutine

from services.pod_sync.metrics import POD_WORKER_DURATION
from services.pod_sync.pleg import PLEG
from services.pod_sync.runtime_view import list_managed_uids
from services.pod_sync.syncer import PodSyncer, SyncResult
from services.pod_sync.workers import PodWorkers
from shared.bus.client import Bus
from shared.bus.messages import (
    ContainerEvent,
    DesiredPodsChanged,
    EvictionsDecided,
    NetworkChanged,
    NodeShutdownChanged,
    PodLifecycleEvents,
    PodRuntimeChanged,
    ProbeResultsChanged,
    VolumesChanged,
)
from shared.tracing import spans as tracing

log = logging.getLogger(__name__)

FIRST_SYNC_WAIT = 30.0


class PodSyncManager:
    def __init__(self, syncer: PodSyncer, sources: list[Any], bus: Bus, resync_every: float,
                 pleg_period: float = 1.0, on_synced: Callable[[], None] = lambda: None) -> None:
        """sources: objects with run(), a `synced` event and an `on_change` callback slot."""
        self.syncer = syncer
        self.sources = sources
        self.bus = bus
        self.resync_every = resync_every
        self.on_synced = on_synced
        self.workers = PodWorkers(self._sync)
        self._synced: set[str] = set()  # pods synced since start: a pod's first sync is its "create"
        self.pleg = PLEG(syncer.runtime, pleg_period, self._wake, self._publish_lifecycle)
        for source in sources:
            source.on_change = self._on_source_change

    @property
    def sources_ready(self) -> bool:
        return all(s.synced.is_set() for s in self.sources)

    async def _sync(self, uid: str, reason: str) -> SyncResult:
        if not self.syncer.is_desired(uid):
            operation = "kill"
        elif uid not in self._synced:
            operation = "create"
        else:
            operation = reason
        started = time.monotonic()
        with tracing.pod_sync_span(uid, operation):
            result = await self.syncer.sync(uid)
        POD_WORKER_DURATION.labels(operation_type=operation).observe(time.monotonic() - started)
        if result.gone:
            self._synced.discard(uid)
        elif operation != "kill":
            self._synced.add(uid)
        await self.bus.publish(PodRuntimeChanged(uids=[uid]))
        return result

    async def _publish_lifecycle(self, events: list[ContainerEvent]) -> None:
        await self.bus.publish(PodLifecycleEvents(events=events))

    def _wake(self, uids: set[str], reason: str = "update") -> None:
        # Until every source has reported once, a pod missing from desire may only be not yet
        # read, not deleted: leave runtime pods alone (the kubelet's "sources ready").
        if not self.sources_ready:
            return
        for uid in uids:
            self.workers.update(uid, reason)

    async def _on_source_change(self, uids: set[str]) -> None:
        await self.bus.publish(DesiredPodsChanged(uids=sorted(uids)))
        self._wake(uids)

    async def _on_network(self, event: NetworkChanged) -> None:
        if event.ready:
            self._wake(set(self.syncer.desired_uids()))

    async def _on_node_shutdown(self, _event: NodeShutdownChanged) -> None:
        """A node shutdown began or ended: admission and static pods change for every pod."""
        self._wake(set(self.syncer.desired_uids()))

    async def _on_pods_named(self, event: ProbeResultsChanged | VolumesChanged | EvictionsDecided) -> None:
        """Probe results, volumes set up, evictions decided: sync the pods they name."""
        self._wake(set(event.uids))

    async def resync_all(self) -> set[str]:
        uids = set(self.syncer.desired_uids()) | await list_managed_uids(self.syncer.runtime)
        self._wake(uids, "sync")
        return uids

    async def run_resync(self) -> None:
        await asyncio.gather(*(s.synced.wait() for s in self.sources))
        reconciled = False
        while True:
            try:
                uids = await self.resync_all()
                if not reconciled:
                    await self._first_syncs(uids)
                    reconciled = True
                self.on_synced()
            except Exception as exc:  # runtime down: the next round tries again
                log.warning("resync failed: %s", exc)
            else:
                try:
                    await self.syncer.remove_orphaned_pod_cgroups(uids)
                except Exception as exc:  # the next round tries again
                    log.warning("removing pod cgroups of no pod failed: %s", exc)
                try:
                    self.syncer.release_user_namespaces(uids)
                except Exception as exc:  # the next round tries again
                    log.warning("freeing user namespaces of no pod failed: %s", exc)
            await asyncio.sleep(self.resync_every)

    async def _first_syncs(self, uids: set[str]) -> None:
        """After a start, the store's runtime rows are the previous run's until every pod has
        been synced once: only then has pod-sync reconciled. A pod still syncing after the
        bound (a long image pull) has written its current state by then."""
        try:
            async with asyncio.timeout(FIRST_SYNC_WAIT):
                await self.workers.synced_once(uids)
            log.info("reconciled: %d pod(s) synced since start", len(uids))
        except TimeoutError:
            log.info("reconciled: %d pod(s) synced, some still syncing after %.0fs", len(uids), FIRST_SYNC_WAIT)

    async def start(self, spawn: Callable[[str, Coroutine[Any, Any, object]], object]) -> None:
        await self.bus.subscribe(NetworkChanged, self._on_network)
        await self.bus.subscribe(NodeShutdownChanged, self._on_node_shutdown)
        await self.bus.subscribe(ProbeResultsChanged, self._on_pods_named)
        await self.bus.subscribe(VolumesChanged, self._on_pods_named)
        await self.bus.subscribe(EvictionsDecided, self._on_pods_named)
        for source in self.sources:
            spawn(f"{type(source).__name__}", source.run())
        spawn("pleg", self.pleg.run())
        spawn("resync", self.run_resync())

    async def close(self) -> None:
        await self.workers.close()
