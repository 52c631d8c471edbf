"""A pod's volumes in the Summary, as the kubelet's volume stat calculator reports them: mounted
filesystems (CSI, PVC) by statvfs off the event loop, small trees of projected files by a bounded
walk, emptyDir by the volume service's measurement. hostPath volumes have no metrics."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from services.node_api.hostfs import FsInfo, statfs
from shared.config.settings import NodeSettings
from shared.host.disk_usage import TreeUsage, tree_usage
from shared.model.volume_plugins import CONFIG_MAP, DOWNWARD_API, EMPTY_DIR, HOST_PATH, PROJECTED, SECRET
from shared.store import PodVolume

log = logging.getLogger(__name__)

# Small trees of projected files: the kubelet measures them with du, so do we (bounded, cached).
WALKED_PLUGINS = frozenset({CONFIG_MAP, SECRET, DOWNWARD_API, PROJECTED})
# No du of big trees per request: walks stop after this many entries.
VOLUME_WALK_LIMIT = 10_000
# A volume with a filesystem of its own (CSI, PVC) may be a network mount that hangs statvfs.
MOUNT_STATFS_TIMEOUT = 5.0
# Volumes come and go: past this many cached walks the stale ones are forgotten.
WALK_CACHE_MAX = 4096


@dataclass
class PodView:
    """What the store knows about one pod."""

    log_dir: str = ""
    images: dict[str, str] = field(default_factory=dict)  # runtime container id -> spec image
    volume_specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> v1 Volume
    volumes: list[PodVolume] = field(default_factory=list)


def inside(root: str | Path, path: str) -> str | None:
    """path resolved, if that is inside root (volume paths come from store rows)."""
    top = os.path.realpath(root).rstrip("/") + "/"
    real = os.path.realpath(path)
    if not real.startswith(top):
        log.warning("%s resolves to %s, outside %s: not measured", path, real, top)
        return None
    return real


def is_mount(row: PodVolume) -> bool:
    """A volume that is a filesystem of its own (CSI, PVC), not a directory on the node's."""
    return row.plugin != EMPTY_DIR and row.plugin not in WALKED_PLUGINS and row.plugin != HOST_PATH


def is_ephemeral(plugin: str, spec: dict[str, Any]) -> bool:
    """The kubelet's isVolumeEphemeral: disk-backed emptyDir, configMap and gitRepo volumes
    count toward the pod's ephemeral storage."""
    if plugin == EMPTY_DIR:
        return not ((spec.get("emptyDir") or {}).get("medium") or "")
    return plugin == CONFIG_MAP or "gitRepo" in spec


class MountProbe:
    """statvfs of mounted volumes off the event loop, with a deadline: a hung network mount
    costs one stuck thread, never the API. While a probe is stuck, the last results are used.
    Resolving the path touches the mount too, so that happens in the thread as well."""

    def __init__(self, timeout: float = MOUNT_STATFS_TIMEOUT) -> None:
        self.timeout = timeout
        self._pending: asyncio.Future[dict[str, FsInfo | None]] | None = None
        self._last: dict[str, FsInfo | None] = {}

    async def statfs(self, paths: list[str], root: Path) -> dict[str, FsInfo | None]:
        """statvfs of each path (as the store has it) that resolves inside root."""
        if not paths:
            return {}
        if self._pending is not None and not self._pending.done():
            log.warning("statvfs of volume mounts is still stuck from an earlier request; using older figures")
            return {p: self._last.get(p) for p in paths}

        def probe() -> dict[str, FsInfo | None]:
            found = {}
            for p in paths:
                real = inside(root, p)
                found[p] = statfs(real) if real else None
            return found

        self._pending = asyncio.get_running_loop().run_in_executor(None, probe)
        try:
            found = await asyncio.wait_for(asyncio.shield(self._pending), self.timeout)
        except TimeoutError:
            log.warning("statvfs of volume mounts took over %.0f s (a hung network mount?)", self.timeout)
            return {p: self._last.get(p) for p in paths}
        self._last = found
        return found


class VolumeStats:
    def __init__(self, settings: NodeSettings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self._clock = clock
        self.mounts = MountProbe()
        self._walks: dict[str, tuple[TreeUsage | None, float]] = {}

    async def statfs_mounts(self, views: list[PodView]) -> dict[str, FsInfo | None]:
        """statvfs of every mounted volume of these pods, by the path the store has."""
        return await self.mounts.statfs([r.host_path for v in views for r in v.volumes if is_mount(r) and r.host_path],
                                        self.settings.root_dir)

    def volumes(self, view: PodView, namespace: str, now: float,
                mount_fs: dict[str, FsInfo | None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(all volume stats, ephemeral first; the ephemeral ones)."""
        ephemeral, persistent = [], []
        for row in sorted(view.volumes, key=lambda r: r.name):
            entry = self._volume(row, view.volume_specs.get(row.name, {}), namespace, now, mount_fs)
            if entry is None:
                continue
            if is_ephemeral(row.plugin, view.volume_specs.get(row.name, {})):
                ephemeral.append(entry)
            else:
                persistent.append(entry)
        return ephemeral + persistent, ephemeral

    def _volume(self, row: PodVolume, spec: dict[str, Any], namespace: str, now: float,
                mount_fs: dict[str, FsInfo | None]) -> dict[str, Any] | None:
        if row.plugin == HOST_PATH or not row.host_path:
            return None
        path: str | None
        if is_mount(row):
            path, fs = row.host_path, mount_fs.get(row.host_path)
        else:
            path = inside(self.settings.root_dir, row.host_path)
            fs = statfs(path) if path else None
        if fs is None or path is None:
            return None
        if row.plugin == EMPTY_DIR:
            # used_bytes is the volume service's full du every volumeStatsAggPeriod
            walk = self._walk(path)
            used, inodes_used = row.used_bytes, walk.inodes if walk else 0
        elif row.plugin in WALKED_PLUGINS:
            walk = self._walk(path)
            used, inodes_used = (walk.bytes, walk.inodes) if walk else (0, 0)
        else:  # a mounted filesystem of its own (CSI, PVC)
            used, inodes_used = fs.used, fs.inodes_used
        claim = (spec.get("persistentVolumeClaim") or {}).get("claimName")
        entry = {"time": now, "availableBytes": fs.available, "capacityBytes": fs.capacity, "usedBytes": used,
                 "inodesFree": fs.inodes_free, "inodes": fs.inodes, "inodesUsed": inodes_used, "name": row.name}
        if isinstance(claim, str) and claim:
            entry["pvcRef"] = {"name": claim, "namespace": namespace}
        return entry

    def _walk(self, path: str) -> TreeUsage | None:
        """A bounded tree walk, reused for volumeStatsAggPeriod (the kubelet's cadence)."""
        period = self.settings.kubelet.volume_stats_agg_period
        now = self._clock()
        cached = self._walks.get(path)
        if cached is not None and now - cached[1] < period:
            return cached[0]
        if len(self._walks) > WALK_CACHE_MAX:
            self._walks = {p: v for p, v in self._walks.items() if now - v[1] < period}
        usage = tree_usage(path, VOLUME_WALK_LIMIT)
        self._walks[path] = (usage, now)
        return usage
