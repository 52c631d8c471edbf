"""Tearing down a removed pod's volumes. They go only when (1) pod-sync no longer wants the pod, has
marked it terminated (after its containers are gone) or finished (failed for good, e.g. evicted),
and (2) nothing of it runs in the runtime (no ready sandbox, no container that has not exited).
The rows are withdrawn first, so pod-sync cannot start anything with the volumes, then the
subPath binds, the CSI publishes and mounts, and the pod directory go."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Callable, cast

from cri_api.v1 import api_pb2 as cri
from sqlalchemy import delete
from sqlalchemy.engine import CursorResult

from services.volume.csi_volumes import PLUGIN as CSI_PLUGIN
from services.volume.csi_volumes import CSIVolumes
from services.volume.local import teardown_mounted_dir
from services.volume.paths import Layout, plugin_dir_name
from services.volume.setup import VOLUME_ERRORS
from shared.host import subpath
from shared.host.mounts import remove_tree
from shared.runtime.cri import RuntimeService
from shared.runtime.cri import labels as L
from shared.store import DesiredPod, PodVolume, Store
from shared.tasks.retry import Backoff

log = logging.getLogger(__name__)


def done_with(row: DesiredPod | None) -> bool:
    """pod-sync no longer wants the pod, has stopped it for deletion, or it failed for good."""
    return row is None or row.terminated or row.finished


class VolumeTeardown:
    def __init__(self, store: Store, layout: Layout, csi: CSIVolumes, runtime: RuntimeService, retry: Backoff,
                 wake: Callable[[list[str]], None], forget: Callable[[str], None]) -> None:
        self.store = store
        self.layout = layout
        self.csi = csi
        self.runtime = runtime
        self.retry = retry
        self.wake = wake  # set the pod up again: it is wanted after all
        self.forget = forget  # the pod and its volumes are gone: drop what is kept about it
        self.cleanup_errors: dict[str, str] = {}  # uid -> why its volumes could not be removed yet

    async def teardown_pod(self, uid: str) -> bool:
        """Remove the pod's volumes if it is done with; True when its rows went."""
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
            await self._unmount_and_remove(uid)
        except VOLUME_ERRORS as exc:
            message = f"volumes of removed pod {uid} not cleaned up yet: {exc}"
            if self.cleanup_errors.get(uid) != message:
                log.warning("%s (retrying)", message)
            self.cleanup_errors[uid] = message
            self.retry.failed(uid)
            return False
        self.cleanup_errors.pop(uid, None)
        self.retry.forget(uid)
        self.forget(uid)
        log.info("pod %s: volumes torn down and pod directory removed", uid)
        return bool(withdrawn)

    async def _unmount_and_remove(self, uid: str) -> None:
        # The subPath bind mounts pod-sync made pin files of the volumes: they go first.
        subpath.clean(self.layout.pod_dir(uid))
        for vol_dir in self._volume_dirs(uid):
            if vol_dir.parent.name == plugin_dir_name(CSI_PLUGIN):
                await self.csi.teardown(vol_dir)
            else:
                await teardown_mounted_dir(vol_dir)
        # In a thread: an emptyDir holds as many files as the pod wrote.
        await asyncio.to_thread(remove_tree, self.layout.pod_dir(uid))

    async def _runtime_has(self, uid: str) -> bool:
        """Does anything of the pod still run (a ready sandbox, a container not exited)? Stopped
        ones may stay for their status; they hold no volume."""
        selector = {L.POD_UID: uid}
        sandboxes = await self.runtime.list_pod_sandbox(selector)
        containers = await self.runtime.list_containers(selector)
        return any(sb.state == cri.SANDBOX_READY for sb in sandboxes) or any(
            c.state != cri.CONTAINER_EXITED for c in containers)

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
