"""Setting up one pod's volumes: each volume made (idempotently: an existing tmpfs or CSI publish is
left as it is) and recorded in pod_volumes, ready or with the reason it is not; pod-sync starts the
pod's containers once every volume is ready. A failure is told as the kubelet tells it: a
FailedMount (or FailedAttachVolume) event, repeated at most every EVENT_REPEAT seconds."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from sqlalchemy import select

from services.volume import metrics as M
from services.volume.atomic_writer import write_atomically
from services.volume.csi_client import CSIError
from services.volume.csi_volumes import AttachPending, CSIVolumes
from services.volume.local import setup_empty_dir, setup_host_path
from services.volume.objects import STATIC_POD_OBJECTS, NoApiObjects, ObjectSource
from services.volume.ownership import set_volume_ownership
from services.volume.paths import Layout
from services.volume.projection import NodeAllocatable, VolumeSourceError, build_payload, keeps_secrets
from shared.bus.events import Recorder
from shared.host.mounts import MountError, is_mount_point, mount_tmpfs
from shared.host.node_dirs import container_dir, private_dir
from shared.model.podspec import VOLUME_SOURCES, Pod, PodCache, Volume
from shared.model.quantity import to_bytes
from shared.model.volume_plugins import PLUGINS
from shared.store import DesiredPod, PodVolume, Store
from shared.store.models import utcnow
from shared.tasks.retry import Backoff

log = logging.getLogger(__name__)

EVENT_REPEAT = 60.0  # the same FailedMount message is repeated at most this often
# What a volume's setup or teardown may fail with, as opposed to a defect.
VOLUME_ERRORS = (VolumeSourceError, MountError, CSIError, OSError, ValueError)


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


class VolumeSetup:
    def __init__(self, store: Store, layout: Layout, csi: CSIVolumes, objects: ObjectSource, node: NodeAllocatable,
                 events: Recorder, pods: PodCache, retry: Backoff) -> None:
        self.store = store
        self.layout = layout
        self.csi = csi
        self.objects = objects
        self.node = node
        self.events = events
        self.pods = pods
        self.retry = retry  # shared with the manager: a pod whose volumes failed is retried alone
        self._last_event: dict[tuple[str, str], tuple[str, float]] = {}

    def forget(self, uid: str) -> None:
        """The pod's volumes are gone: so is what was said about them."""
        for key in [k for k in self._last_event if k[0] == uid]:
            del self._last_event[key]

    async def setup_pod(self, row: DesiredPod) -> bool:
        """Set up every volume of the pod; True when anything pod-sync cares about changed."""
        pod = self.pods.get(row.uid, row.manifest)
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
                results.append(PodVolume(pod_uid=pod.uid, name=volume.name, plugin=plugin,
                                         host_path="" if path is None else str(path),
                                         ready=True,
                                         size_limit_bytes=to_bytes(limit) if limit else 0))
            except AttachPending as exc:
                results.append(self._failure(pod, volume, plugin, "FailedAttachVolume", str(exc)))
            except VOLUME_ERRORS as exc:
                results.append(self._failure(pod, volume, plugin, "FailedMount",
                                             f'MountVolume.SetUp failed for volume "{volume.name}" : {exc}'))
            except Exception as exc:  # a defect, but the user still learns which volume and why
                log.exception("pod %s: volume %s", pod.full_name, volume.name)
                results.append(self._failure(pod, volume, plugin, "FailedMount",
                                             f'MountVolume.SetUp failed for volume "{volume.name}" : '
                                             f"internal error: {type(exc).__name__}: {exc}"))
        if any(not r.ready for r in results):
            self.retry.failed(pod.uid)
        else:
            self.retry.forget(pod.uid)
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

    async def _setup_volume(self, pod: Pod, volume: Volume, objects: ObjectSource) -> Path | None:
        """Where the volume is on the host; None for one the runtime mounts itself."""
        kind, src = volume.kind, volume.source
        if kind not in VOLUME_SOURCES:
            raise VolumeSourceError(f"no volume plugin matched: pykubelet does not mount {kind} volumes "
                                    f"(it mounts {', '.join(VOLUME_SOURCES)})")
        if kind == "image":  # pod-sync pulls the image and names it in the CRI mount
            return None
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
        payload = await build_payload(kind, src, pod, objects, self.node, volume.name)
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
