"""The volume service's loop: make every desired pod's volumes exist (setup.py), and remove the
volumes of pods that are gone (teardown.py), from the store and the disk alone, so a restart or a
lost event loses nothing. Pods are found from the disk (<root>/pods/<uid>) as well as from the
store, so a pod deleted while this service was down is cleaned up when it comes back. What the
volumes hold is measured apart (usage.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from sqlalchemy import select

from services.volume.csi_volumes import CSIVolumes
from services.volume.objects import ObjectSource
from services.volume.paths import Layout
from services.volume.projection import NodeAllocatable
from services.volume.setup import VolumeSetup, referenced_objects
from services.volume.teardown import VolumeTeardown, done_with
from services.volume.usage import VolumeUsage
from shared.bus.client import Bus
from shared.bus.events import Recorder
from shared.bus.messages import VolumesChanged
from shared.model.podspec import PodCache
from shared.runtime.cri import RuntimeService
from shared.store import DesiredPod, PodVolume, Store
from shared.tasks.retry import Backoff

log = logging.getLogger(__name__)

RETRY_INITIAL, RETRY_MAX = 1.0, 60.0
SETUP_CONCURRENCY = 8


class VolumeManager:
    def __init__(self, store: Store, bus: Bus, layout: Layout, csi: CSIVolumes, objects: ObjectSource,
                 node: NodeAllocatable, runtime: RuntimeService, events: Recorder, resync_every: float) -> None:
        self.store = store
        self.bus = bus
        self.layout = layout
        self.objects = objects
        self.resync_every = resync_every
        self._pods = PodCache()
        self._dirty: set[str] = set()
        self._full = True
        self._wake = asyncio.Event()
        # Pods whose volumes failed to set up or tear down: retried alone, after a back-off.
        self._retry = Backoff(RETRY_INITIAL, RETRY_MAX, clock=time.monotonic)
        self.setup = VolumeSetup(store, layout, csi, objects, node, events, self._pods, self._retry)
        self.teardown = VolumeTeardown(store, layout, csi, runtime, self._retry, wake=self.wake, forget=self._forget)
        self.usage = VolumeUsage(store, layout, csi)
        self.reconciled = asyncio.Event()
        self._last_full = 0.0

    @property
    def cleanup_errors(self) -> dict[str, str]:
        """uid -> why its volumes could not be removed yet."""
        return self.teardown.cleanup_errors

    def _forget(self, uid: str) -> None:
        self._pods.forget(uid)
        self.objects.forget_pod(uid)
        self.setup.forget(uid)

    # -- waking --------------------------------------------------------------------------------

    def wake(self, uids: list[str] | set[str] | None = None) -> None:
        if uids is None:
            self._full = True
        else:
            self._dirty.update(uids)
        self._wake.set()

    def wake_for_object(self, kind: str, namespace: str, name: str) -> None:
        """A watched configMap/secret changed: resync the pods whose volumes use it."""
        with self.store.session() as s:
            rows = list(s.scalars(select(DesiredPod).where(DesiredPod.namespace == namespace,
                                                           DesiredPod.terminated.is_(False))))
        uids = [r.uid for r in rows if (kind, namespace, name) in referenced_objects(self._pods.get(r.uid, r.manifest))]
        log.info("%s %s/%s changed; updating volumes of %d pod(s)", kind, namespace, name, len(uids))
        self.wake(uids)

    async def run(self, before_first: asyncio.Event | None = None, wait_at_most: float = 15.0,
                  on_synced: Callable[[], None] = lambda: None) -> None:
        """before_first: wait (bounded) for it before the first round, e.g. for the plugins
        already running to register, so their volumes are recognised instead of retried."""
        if before_first is not None:
            try:
                await asyncio.wait_for(before_first.wait(), wait_at_most)
            except asyncio.TimeoutError:
                log.warning("plugin registry not scanned after %.0fs; reconciling volumes anyway", wait_at_most)
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._next_timeout())
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            full, dirty = self._full, self._dirty
            self._full, self._dirty = False, set()
            due = {uid for uid, wait in self._retry.waiting().items() if wait <= 0}
            try:
                await self.reconcile(None if full else dirty | due)
                if full:
                    on_synced()
            except Exception:
                log.exception("volume reconcile failed; retrying on the next round")
                self._full = True
                await asyncio.sleep(RETRY_INITIAL)

    def _next_timeout(self) -> float:
        timeout = max(0.0, self._last_full + self.resync_every - time.monotonic())
        if timeout == 0.0:
            self._full = True
        for wait in self._retry.waiting().values():
            timeout = min(timeout, wait)
        return max(timeout, 0.05)

    # -- reconcile -------------------------------------------------------------------------------

    async def reconcile(self, uids: set[str] | None) -> None:
        """uids None: every pod (store and disk); otherwise just these."""
        if uids is None:
            self._last_full = time.monotonic()
        with self.store.session() as s:
            rows = {r.uid: r for r in s.scalars(select(DesiredPod))}
            recorded = set(s.scalars(select(PodVolume.pod_uid).distinct()))
        active = {uid: r for uid, r in rows.items() if not done_with(r)}
        candidates = set(active) | recorded | self.layout.pod_uids_on_disk() if uids is None else set(uids)
        # The configMaps and secrets each active pod's volumes read, worked out once per reconcile.
        pod_refs = {uid: referenced_objects(self._pods.get(uid, row.manifest)) for uid, row in active.items()
                    if uids is None or uid in uids}
        sem = asyncio.Semaphore(SETUP_CONCURRENCY)

        async def one(uid: str) -> bool:
            async with sem:
                row = active.get(uid)
                try:
                    if row is not None:
                        self.objects.register_pod(uid, pod_refs[uid])
                        return await self.setup.setup_pod(row)
                    if uid in rows or uid in recorded or self.layout.pod_dir(uid).exists():
                        return await self.teardown.teardown_pod(uid)
                except Exception:
                    # One pod's failure must not hold back the others' volumes: retry it alone.
                    delay = self._retry.failed(uid)
                    log.exception("volumes of pod %s failed; retrying it in %.0fs", uid, delay)
                return False

        changed = await asyncio.gather(*(one(uid) for uid in sorted(candidates)))
        touched = [uid for uid, c in zip(sorted(candidates), changed, strict=True) if c]
        if touched:
            await self.bus.publish(VolumesChanged(uids=touched))
        if uids is None:
            self.objects.stop_unused_watches(set().union(*pod_refs.values()))
        self.reconciled.set()

    async def collect_stats(self) -> None:
        await self.usage.collect()
