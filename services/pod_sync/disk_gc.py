"""Freeing disk the runtime holds: old dead containers and images no pod uses.

Two triggers, as in the kubelet:
- image GC at the start and every IMAGE_GC_PERIOD (gc_period): when the image filesystem is
  more than imageGCHighThresholdPercent full, unused images go, least recently used first,
  until it is down to imageGCLowThresholdPercent; images unused for imageMaximumGCAge go
  whatever the disk;
- disk pressure: the eviction service asks (reclaim_requests); every dead container that is not
  the newest instance of its container goes, then every unused image, and the answer goes to
  disk_reclaim so eviction can measure again before it evicts anyone.

An image is in use when any container in the runtime was made from it, a pod this node should
run names it (running or not started yet, a container's image or an image volume's), or it is
the runtime's sandbox (pause) image. Images
seen for the first time less than imageMinimumGCAge ago stay.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from cri_api.v1 import api_pb2 as cri
from prometheus_client import Counter
from sqlalchemy import select

from shared.bus.client import Bus
from shared.bus.messages import DiskReclaimed, DiskReclaimRequested
from shared.model.podspec import Pod
from shared.runtime.cri import CRIError, Runtime
from shared.runtime.cri import labels as L
from shared.runtime.cri.imagefs import imagefs_mountpoint
from shared.store import DesiredPod, DiskReclaim, ReclaimRequest, Store
from shared.store.models import utcnow

log = logging.getLogger(__name__)

IMAGE_GC_PERIOD = 300.0  # the kubelet's ImageGCPeriod
MIN_GC_PERIOD = 5.0


def gc_period(max_age: float) -> float:
    """How often image GC runs. The kubelet's fixed 5 minutes, except that with an
    imageMaximumGCAge under 20 minutes it runs every quarter of that age (5 s at least): an
    image then goes within a quarter of its age past it, where a 1-minute age would otherwise
    keep images up to 6 minutes. A round with nothing to free lists the images and containers
    and stats one filesystem."""
    if not max_age:
        return IMAGE_GC_PERIOD
    return min(IMAGE_GC_PERIOD, max(MIN_GC_PERIOD, max_age / 4))


IMAGES_REMOVED = Counter("pykubelet_image_gc_removed_images_total", "Images removed by garbage collection",
                         ["trigger"])
BYTES_FREED = Counter("pykubelet_image_gc_freed_bytes_total", "Bytes of images removed by garbage collection",
                      ["trigger"])


def normalize_image(ref: str) -> str:
    """An image name as the runtime lists it: registry and tag spelled out."""
    name, _, digest = ref.partition("@")
    if digest:
        return ref
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        name += ":latest"
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = "docker.io/" + (name if "/" in name else f"library/{name}")
    return name


@dataclass
class GCResult:
    images: list[str] = field(default_factory=list)
    containers: int = 0
    freed: int = 0
    error: str = ""


class DiskReclaimer:
    def __init__(self, runtime: Runtime, store: Store, bus: Bus, high_percent: int, low_percent: int,
                 min_age: float, clock: Callable[[], float] = time.monotonic, max_age: float = 0.0) -> None:
        """max_age (imageMaximumGCAge): an image unused for longer is removed whatever the disk
        usage; 0 keeps images as long as there is room. Ages count from this process's first
        look at an image, as the kubelet's do."""
        self.runtime = runtime
        self.store = store
        self.bus = bus
        self.high = high_percent
        self.low = low_percent
        self.min_age = min_age
        self.max_age = max_age
        self.clock = clock
        self._first_seen: dict[str, float] = {}  # image ID -> when first listed
        self._last_used: dict[str, float] = {}  # image ID -> when last seen in use
        self._sandbox_image: str | None = None
        self.on_removed: Callable[[], None] | None = None  # told when a collection removed images
        self.on_removed_ids: Callable[[list[str]], None] | None = None  # told the IDs it removed

    # -- what is in use -------------------------------------------------------------------------

    def pulled(self, image_id: str) -> None:
        """An image pod-sync pulled: its age for imageMinimumGCAge counts from now."""
        self._first_seen.setdefault(image_id, self.clock())

    async def _in_use(self, images: list[cri.Image]) -> set[str]:
        """IDs of images a container, a wanted pod or the sandbox uses."""
        by_name: dict[str, str] = {}
        for img in images:
            for name in [*img.repo_tags, *img.repo_digests]:
                by_name[name] = img.id

        def id_of(ref: str) -> str:
            """The ID of the image a pod or the runtime names, as written or spelled out."""
            return by_name.get(normalize_image(ref), by_name.get(ref, ""))

        used = set()
        for c in await self.runtime.list_containers():
            used.add(by_name.get(c.image.image, c.image.image))
            used.add(c.image_ref)
        with self.store.session() as s:
            manifests = [d.manifest for d in s.scalars(select(DesiredPod))]
        for manifest in manifests:
            try:
                pod = Pod.from_manifest(manifest)
            except ValueError:
                continue
            for spec in pod.spec.all_containers:
                used.add(id_of(spec.image))
            # An image volume's image is in use while its pod is wanted (the runtime's container
            # list names only the containers' own images).
            for volume in pod.spec.volumes:
                if (source := volume.image) is not None:
                    used.add(id_of(source.reference))
        if self._sandbox_image is None:
            try:
                self._sandbox_image = (await self.runtime.runtime_config()).get("sandboxImage", "")
            except CRIError as exc:
                log.warning("cannot ask the runtime for its sandbox image: %s", exc)
        if self._sandbox_image:
            used.add(id_of(self._sandbox_image))
        used.discard("")
        return used

    # -- freeing --------------------------------------------------------------------------------

    async def free_images(self, bytes_to_free: int | None, trigger: str) -> GCResult:
        """Remove unused images, least recently used first, until bytes_to_free (None: all)."""
        _, candidates = await self._unused()
        return await self._remove(candidates, bytes_to_free, trigger)

    async def free_images_unused_for(self, max_age: float) -> GCResult:
        """Remove every image no one has used for longer than max_age seconds."""
        now, candidates = await self._unused()
        old = [img for img in candidates if now - self._last_used.get(img.id, self._first_seen[img.id]) > max_age]
        return await self._remove(old, None, "image max age")

    async def _unused(self) -> tuple[float, list[cri.Image]]:
        """(now, the images no one uses that are older than min_age, least recently used
        first); notes which images are in use now."""
        now = self.clock()
        images = await self.runtime.list_images()
        in_use = await self._in_use(images)
        for img in images:
            self._first_seen.setdefault(img.id, now)
            if img.id in in_use:
                self._last_used[img.id] = now
        listed = {img.id for img in images}
        for gone in [i for i in self._first_seen if i not in listed]:
            self._first_seen.pop(gone, None)
            self._last_used.pop(gone, None)
        candidates = [img for img in images if img.id not in in_use
                      and now - self._first_seen[img.id] >= self.min_age]
        candidates.sort(key=lambda img: self._last_used.get(img.id, self._first_seen[img.id]))
        return now, candidates

    async def _remove(self, candidates: list[cri.Image], bytes_to_free: int | None, trigger: str) -> GCResult:
        result = GCResult()
        for img in candidates:
            if bytes_to_free is not None and result.freed >= bytes_to_free:
                break
            try:
                await self.runtime.remove_image(img.id)
            except CRIError as exc:
                result.error = f"removing image {img.id[:19]}: {exc.details}"
                log.warning("image GC (%s): %s", trigger, result.error)
                continue
            if self.on_removed_ids is not None:
                self.on_removed_ids([img.id])
            name = (img.repo_tags or img.repo_digests or [img.id])[0]
            result.images.append(name)
            result.freed += img.size
            IMAGES_REMOVED.labels(trigger).inc()
            BYTES_FREED.labels(trigger).inc(img.size)
            log.info("image GC (%s): removed %s (%d bytes)", trigger, name, img.size)
        return result

    async def remove_old_dead_containers(self) -> int:
        """Exited containers that are not the newest instance of their container: the newest one
        stays, so a finished pod keeps its status and a crashed one its restart."""
        containers = await self.runtime.list_containers({L.MANAGED_BY: "true"})
        newest: dict[tuple[str, str], int] = {}
        for c in containers:
            key = (c.labels.get(L.POD_UID, ""), c.metadata.name)
            newest[key] = max(newest.get(key, -1), c.metadata.attempt)
        removed = 0
        for c in containers:
            key = (c.labels.get(L.POD_UID, ""), c.metadata.name)
            if c.state == cri.CONTAINER_EXITED and c.metadata.attempt < newest[key]:
                try:
                    await self.runtime.remove_container(c.id)
                    removed += 1
                except CRIError as exc:
                    if not exc.not_found:
                        log.warning("disk reclaim: removing container %s: %s", c.id[:13], exc.details)
        return removed

    async def imagefs_usage(self) -> tuple[int, int] | None:
        """(used, capacity) bytes of the filesystem images live on."""
        mountpoint = await imagefs_mountpoint(self.runtime)
        if mountpoint is None:
            return None
        try:
            st = os.statvfs(mountpoint)
        except OSError:
            return None
        capacity = st.f_blocks * st.f_frsize
        return capacity - st.f_bavail * st.f_frsize, capacity

    # -- triggers -------------------------------------------------------------------------------

    async def periodic_image_gc(self) -> None:
        if self.max_age:
            old = await self.free_images_unused_for(self.max_age)
            if old.images:
                await self._record(0, "image max age", old)
        usage = await self.imagefs_usage()
        if usage is None or not usage[1]:
            return
        used, capacity = usage
        percent = used * 100 / capacity
        if percent < self.high:
            return
        goal = used - capacity * self.low // 100
        log.info("image filesystem %.0f%% full (imageGCHighThresholdPercent %d): freeing %d bytes of unused images",
                 percent, self.high, goal)
        result = await self.free_images(goal, "image GC")
        if result.freed < goal:
            result.error = result.error or (f"freed {result.freed} of {goal} bytes wanted: "
                                            "the rest of the images are in use or too new")
            log.warning("image GC: %s", result.error)
        await self._record(0, "image GC", result)

    async def on_request(self, event: DiskReclaimRequested) -> None:
        with self.store.session() as s:
            req, done = s.get(ReclaimRequest, 1), s.get(DiskReclaim, 1)
        if req is None:
            return
        if done is not None and done.answered_sequence >= req.sequence:
            return  # answered already (a repeated event)
        result = GCResult()
        try:
            result.containers = await self.remove_old_dead_containers()
            images = await self.free_images(None, "disk pressure")
            result.images, result.freed, result.error = images.images, images.freed, images.error
        except CRIError as exc:
            result.error = f"runtime: {exc.details}"
            log.warning("disk reclaim failed: %s", result.error)
        await self._record(req.sequence, "disk pressure", result)

    async def _record(self, sequence: int, trigger: str, result: GCResult) -> None:
        if result.images and self.on_removed is not None:
            self.on_removed()
        # In a thread: the write may wait out another service's lock on the store.
        answered = await self.store.run(self._write_result, sequence, trigger, result)
        await self.bus.publish(DiskReclaimed(sequence=answered))

    def _write_result(self, sequence: int, trigger: str, result: GCResult) -> int:
        with self.store.session() as s:
            prev = s.get(DiskReclaim, 1)
            answered = max(sequence, prev.answered_sequence if prev else 0)
            s.merge(DiskReclaim(id=1, answered_sequence=answered, trigger=trigger, images_removed=result.images,
                                containers_removed=result.containers, bytes_freed=result.freed,
                                error=result.error, finished_at=utcnow()))
        return answered
