"""The volume service's loop: make every desired pod's volumes exist, and remove the volumes of
pods that are gone, from the store and the disk alone (so a restart or a lost event loses nothing).

Set up: for each pod pod-sync wants (desired_pods, not terminated or finished), each volume is set up
(idempotently: an existing tmpfs or CSI publish is left as it is) and recorded in pod_volumes;
pod-sync starts containers once every volume of the pod is ready.

Tear down: a pod's volumes go only when (1) pod-sync no longer wants the pod, has marked it
terminated (after its containers are gone) or finished (failed for good, e.g. evicted), and (2)
nothing of it runs in the runtime (no ready sandbox, no container that has not exited). Pods are
found from the disk (<root>/pods/<uid>) as well as from the store, so a
pod deleted while this service was down is cleaned up when it comes back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, cast

from cri_api.v1 import api_pb2 as cri
from sqlalchemy import delete, select
from sqlalchemy.engine import CursorResult

from services.volume import metrics as M
from services.volume.atomic_writer import write_atomically
from services.volume.csi_client import CSIError
from services.volume.csi_volumes import PLUGIN as CSI_PLUGIN
from services.volume.csi_volumes import AttachPending, CSIVolumes, VolData, read_vol_data
from services.volume.local import setup_empty_dir, setup_host_path, teardown_mounted_dir
from services.volume.objects import STATIC_POD_OBJECTS, NoApiObjects, ObjectSource
from services.volume.ownership import set_volume_ownership
from services.volume.paths import Layout, plugin_dir_name
from services.volume.projection import NodeAllocatable, VolumeSourceError, build_payload, keeps_secrets
from shared.bus.client import Bus, VolumesChanged
from shared.bus.events import Recorder
from shared.host import subpath
from shared.host.disk_usage import tree_usage
from shared.host.mounts import MountError, is_mount_point, mount_tmpfs, remove_tree
from shared.host.node_dirs import container_dir, private_dir
from shared.model.podspec import VOLUME_SOURCES, Pod, PodCache, Volume
from shared.model.quantity import to_bytes
from shared.model.volume_plugins import PLUGINS
from shared.runtime.cri import RuntimeService
from shared.runtime.cri import labels as L
from shared.store import DesiredPod, PodVolume, Store
from shared.store.models import utcnow
from shared.tasks.retry import Backoff

log = logging.getLogger(__name__)

RETRY_INITIAL, RETRY_MAX = 1.0, 60.0
EVENT_REPEAT = 60.0  # the same FailedMount message is repeated at most this often
SETUP_CONCURRENCY = 8
_VOLUME_ERRORS = (VolumeSourceError, MountError, CSIError, OSError, ValueError)


def referenced_objects(pod: Pod) -> set[tuple[str, str, str]]:
    """(configmap|secret, namespace, name) the pod's volumes read."""
    ns = pod.metadata.namespace
    refs: set[tuple[str, str, str]] = set()
    for v in pod.spec.volumes:
        src = v.source
        parts = src.get("sources") or [] if v.kind == "projected" else [{v.kind: src}]
        for part in parts:
            if "configMap" in part and part["configMap"].get("name"):
                refs.add(("configmap", ns, part["configMap"]["name"]))
            if "secret" in part:
                name = part["secret"].get("secretName") or part["secret"].get("name")
                if name:
                    refs.add(("secret", ns, name))
    return refs


def done_with(row: DesiredPod | None) -> bool:
    """pod-sync no longer wants the pod, has stopped it for deletion, or it failed for good."""
    return row is None or row.terminated or row.finished


class VolumeManager:
    def __init__(self, store: Store, bus: Bus, layout: Layout, csi: CSIVolumes, objects: ObjectSource,
                 node: NodeAllocatable, runtime: RuntimeService, events: Recorder, resync_every: float) -> None:
        self.store = store
        self.bus = bus
        self.layout = layout
        self.csi = csi
        self.objects = objects
        self.node = node
        self.runtime = runtime
        self.events = events
        self.resync_every = resync_every
        self._pods = PodCache()
        self._dirty: set[str] = set()
        self._full = True
        self._wake = asyncio.Event()
        # Pods whose volumes failed to set up or tear down: retried alone, after a back-off.
        self._retry = Backoff(RETRY_INITIAL, RETRY_MAX, clock=time.monotonic)
        self._last_event: dict[tuple[str, str], tuple[str, float]] = {}
        self.cleanup_errors: dict[str, str] = {}  # uid -> why its volumes could not be removed yet
        self.reconciled = asyncio.Event()
        self._last_full = 0.0

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
        sem = asyncio.Semaphore(SETUP_CONCURRENCY)

        async def one(uid: str) -> bool:
            async with sem:
                row = active.get(uid)
                try:
                    if row is not None:
                        return await self._setup_pod(row)
                    if uid in rows or uid in recorded or self.layout.pod_dir(uid).exists():
                        return await self._teardown_pod(uid)
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
            refs: set[tuple[str, str, str]] = set()
            for uid, row in active.items():
                refs |= referenced_objects(self._pods.get(uid, row.manifest))
            self.objects.stop_unused_watches(refs)
        self.reconciled.set()

    # -- set up ----------------------------------------------------------------------------------

    async def _setup_pod(self, row: DesiredPod) -> bool:
        pod = self._pods.get(row.uid, row.manifest)
        if not pod.spec.volumes:
            return False
        results: list[PodVolume] = []
        private_dir(self.layout.pod_dir(pod.uid))
        # Static pods may not read API objects; in standalone mode self.objects already says so.
        objects = self.objects if row.source == "api" or isinstance(self.objects, NoApiObjects) \
            else STATIC_POD_OBJECTS
        for volume in pod.spec.volumes:
            plugin = PLUGINS.get(volume.kind, volume.kind)
            try:
                path = await self._setup_volume(pod, volume, objects)
                limit = volume.source.get("sizeLimit") if volume.kind == "emptyDir" else None
                results.append(PodVolume(pod_uid=pod.uid, name=volume.name, plugin=plugin, host_path=str(path),
                                         ready=True,
                                         size_limit_bytes=to_bytes(limit) if limit else 0))
            except AttachPending as exc:
                results.append(self._failure(pod, volume, plugin, "FailedAttachVolume", str(exc)))
            except _VOLUME_ERRORS as exc:
                results.append(self._failure(pod, volume, plugin, "FailedMount",
                                             f'MountVolume.SetUp failed for volume "{volume.name}" : {exc}'))
            except Exception as exc:  # a defect, but the user still learns which volume and why
                log.exception("pod %s: volume %s", pod.full_name, volume.name)
                results.append(self._failure(pod, volume, plugin, "FailedMount",
                                             f'MountVolume.SetUp failed for volume "{volume.name}" : '
                                             f"internal error: {type(exc).__name__}: {exc}"))
        failed = [r for r in results if not r.ready]
        if failed:
            self._retry.failed(pod.uid)
        else:
            self._retry.forget(pod.uid)
        # In a thread: the write may wait up to the store's busy timeout for another service's
        # write, and that wait must not hold this service's loop (every other pod's mounts).
        return await self.store.run(self._record, pod.uid, results)

    def _failure(self, pod: Pod, volume: Volume, plugin: str, reason: str, message: str) -> PodVolume:
        key = (pod.uid, volume.name)
        last = self._last_event.get(key)
        if last is None or last[0] != message or time.monotonic() - last[1] > EVENT_REPEAT:
            log.warning("pod %s: %s", pod.full_name, message)
            self.events.pod(pod.metadata.namespace, pod.metadata.name, pod.uid, "Warning", reason, message)
            self._last_event[key] = (message, time.monotonic())
        return PodVolume(pod_uid=pod.uid, name=volume.name, plugin=plugin, ready=False, reason=reason,
                         message=message)

    async def _setup_volume(self, pod: Pod, volume: Volume, objects: ObjectSource) -> Path:
        kind, src = volume.kind, volume.source
        if kind not in VOLUME_SOURCES:
            raise VolumeSourceError(f"no volume plugin matched: pykubelet does not mount {kind} volumes "
                                    f"(it mounts {', '.join(VOLUME_SOURCES)})")
        if kind == "hostPath":
            return setup_host_path(src)
        if kind in ("csi", "persistentVolumeClaim"):
            return await self.csi.setup(pod, await self.csi.resolve(pod, volume, objects))
        path = self.layout.volume_dir(pod.uid, PLUGINS[kind], volume.name)
        psc = pod.spec.securityContext
        if kind == "emptyDir":
            with M.timed(PLUGINS[kind], "volume_mount"):
                if await setup_empty_dir(path, pod, src, self.node.memory_bytes) and psc.fsGroup is not None:
                    await asyncio.to_thread(set_volume_ownership, path, psc.fsGroup, False, psc.fsGroupChangePolicy)
            return path
        payload = await build_payload(kind, src, pod, objects, self.node)
        container_dir(path)
        with M.timed(PLUGINS[kind], "volume_mount"):
            if keeps_secrets(kind) and not is_mount_point(path):
                await mount_tmpfs(path, None, mode="0755")
            if await asyncio.to_thread(write_atomically, path, payload):
                log.info("pod %s: volume %s (%s) written (%d files)", pod.full_name, volume.name, kind, len(payload))
                if psc.fsGroup is not None:  # what the writer just made: readable by the pod's group
                    await asyncio.to_thread(set_volume_ownership, path, psc.fsGroup, True, None)
        return path

    def _record(self, uid: str, results: list[PodVolume]) -> bool:
        """Store the rows; True when anything pod-sync cares about changed."""
        changed = False
        with self.store.session() as s:
            existing = {r.name: r for r in s.scalars(select(PodVolume).where(PodVolume.pod_uid == uid))}
            for new in results:
                old = existing.get(new.name)
                if old is not None and (old.ready, old.host_path, old.message, old.reason) == \
                        (new.ready, new.host_path, new.message, new.reason):
                    continue
                new.used_bytes = old.used_bytes if old is not None else 0
                new.updated_at = utcnow()
                s.merge(new)
                changed = True
        return changed

    # -- tear down -------------------------------------------------------------------------------

    async def _runtime_has(self, uid: str) -> bool:
        """Does anything of the pod still run (a ready sandbox, a container not exited)? Stopped
        ones may stay for their status; they hold no volume."""
        selector = {L.POD_UID: uid}
        sandboxes = await self.runtime.list_pod_sandbox(selector)
        containers = await self.runtime.list_containers(selector)
        return any(sb.state == cri.SANDBOX_READY for sb in sandboxes) or any(
            c.state != cri.CONTAINER_EXITED for c in containers)

    async def _teardown_pod(self, uid: str) -> bool:
        with self.store.session() as s:
            row = s.get(DesiredPod, uid)
        if not done_with(row):
            return False  # wanted again (the check above raced with pod-sync)
        if await self._runtime_has(uid):
            return False  # pod-sync has not finished stopping it; come back after its next report
        # Withdraw the volumes first, so pod-sync cannot start anything with them, then look once
        # more: a static pod re-added with the same content has the same UID.
        withdrawn = await self.store.run(self._withdraw, uid)
        with self.store.session() as s:
            row = s.get(DesiredPod, uid)
        if not done_with(row) or await self._runtime_has(uid):
            self.wake([uid])  # set up again; nothing was unmounted
            return bool(withdrawn)
        try:
            # The subPath bind mounts pod-sync made pin files of the volumes: they go first.
            subpath.clean(self.layout.pod_dir(uid))
            for vol_dir in self._volume_dirs(uid):
                if vol_dir.parent.name == plugin_dir_name(CSI_PLUGIN):
                    await self.csi.teardown(vol_dir)
                else:
                    await teardown_mounted_dir(vol_dir)
            # In a thread: an emptyDir holds as many files as the pod wrote.
            await asyncio.to_thread(remove_tree, self.layout.pod_dir(uid))
        except _VOLUME_ERRORS as exc:
            message = f"volumes of removed pod {uid} not cleaned up yet: {exc}"
            if self.cleanup_errors.get(uid) != message:
                log.warning("%s (retrying)", message)
            self.cleanup_errors[uid] = message
            self._retry.failed(uid)
            return False
        self.cleanup_errors.pop(uid, None)
        self._retry.forget(uid)
        self._pods.forget(uid)
        self.objects.forget_pod(uid)
        for key in [k for k in self._last_event if k[0] == uid]:
            del self._last_event[key]
        log.info("pod %s: volumes torn down and pod directory removed", uid)
        return bool(withdrawn)

    def _withdraw(self, uid: str) -> int:
        """Delete the pod's volume rows; how many there were."""
        with self.store.session() as s:
            # A DELETE's result counts the rows it removed.
            return cast("CursorResult[Any]", s.execute(delete(PodVolume).where(PodVolume.pod_uid == uid))).rowcount

    def _volume_dirs(self, uid: str) -> list[Path]:
        base = self.layout.volumes_dir(uid)
        if not base.is_dir():
            return []
        return [d for plugin in base.iterdir() if plugin.is_dir() for d in plugin.iterdir()]

    # -- usage -----------------------------------------------------------------------------------

    async def collect_stats(self) -> None:
        """What emptyDirs hold (for eviction) and kubelet_volume_stats_* for CSI PVC volumes."""
        await self._measure_empty_dirs()
        await self._csi_stats()

    async def _measure_empty_dirs(self) -> None:
        with self.store.session() as s:
            rows = [(r.pod_uid, r.name, r.host_path, r.used_bytes) for r in s.scalars(
                select(PodVolume).where(PodVolume.plugin == PLUGINS["emptyDir"], PodVolume.ready.is_(True)))]
        for uid, name, path, before in rows:
            used = await asyncio.to_thread(disk_usage, Path(path))
            if used != before:
                await self.store.run(self._write_usage, uid, name, used)

    def _write_usage(self, uid: str, name: str, used: int) -> None:
        with self.store.session() as s:
            row = s.get(PodVolume, (uid, name))
            if row is not None:
                row.used_bytes = used

    async def _csi_stats(self) -> None:
        # The walk in a thread: listing every pod's volume directories held the loop 0.39 s on a
        # busy disk.
        pattern = f"*/volumes/{plugin_dir_name(CSI_PLUGIN)}/*/vol_data.json"
        found_files = await asyncio.to_thread(lambda: list(self.layout.pods.glob(pattern)))
        for vol_data in found_files:
            try:
                found = await self.csi.volume_stats(vol_data.parent)
            except CSIError as exc:
                log.warning("volume stats for %s failed: %s", vol_data.parent, exc)
                continue
            if found is None:
                found = _statvfs_stats(vol_data.parent)
            if found is not None:
                data, stats = found
                M.set_volume_stats(data.claimNamespace, data.claimName, stats)


def disk_usage(path: Path) -> int:
    """Bytes a directory tree occupies (allocated blocks, like du), not following symlinks or
    crossing into other mounts; a tmpfs emptyDir counts what its tmpfs holds. Every entry is
    seen (sizeLimit must not be evaded by many files): call it in a thread."""
    usage = tree_usage(path, max_entries=None)
    return usage.bytes if usage is not None else 0


def _statvfs_stats(vol_dir: Path) -> tuple[VolData, dict[str, int]] | None:
    data = read_vol_data(vol_dir)
    target = vol_dir / "mount"
    if data is None or not data.claimName or not is_mount_point(target):
        return None
    st = os.statvfs(target)
    return data, {"bytes_total": st.f_blocks * st.f_frsize, "bytes_available": st.f_bavail * st.f_frsize,
                  "bytes_used": (st.f_blocks - st.f_bfree) * st.f_frsize, "inodes_total": st.f_files,
                  "inodes_available": st.f_ffree, "inodes_used": st.f_files - st.f_ffree}
