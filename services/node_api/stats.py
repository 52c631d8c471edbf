"""The kubelet's stats endpoints, data only: /stats/summary, /metrics/resource,
/metrics/cadvisor and /spec.

The node's figures come from the root cgroup and /proc, each pod's from CRI (ListContainerStats,
and ListPodSandboxStats where the runtime has it, sampled in the background: sandbox_stats.py), volumes and logs from the store and a look at
the filesystem. Like the kubelet's CRI stats provider, usageNanoCores is the rate between the
previous cumulative CPU sample and this one, so the first read after a start has none.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from cri_api.v1 import api_pb2 as cri
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from services.node_api import resource_metrics
from services.node_api.hostfs import (
    FsInfo,
    default_route_interface,
    device_of,
    node_interfaces,
    read_mounts,
    rlimit,
    statfs,
    statfs_nearest,
)
from services.node_api.machine import MachineFacts, MachineSpec
from services.node_api.sandbox_stats import SandboxStatsCache
from services.node_api.snapshot import ContainerIds, PodIds, Snapshot, summary_json
from shared.config.settings import NodeSettings
from shared.host.cgroup_names import container_cgroup
from shared.host.cgroups import KUBEPODS, CgroupReader, CgroupSample
from shared.host.disk_usage import TreeUsage, tree_usage
from shared.host.facts import boot_time, memory_capacity_bytes
from shared.model.container_id import runtime_container_id
from shared.model.volume_plugins import CONFIG_MAP, DOWNWARD_API, EMPTY_DIR, HOST_PATH, PROJECTED, SECRET
from shared.runtime.cri import labels as L
from shared.runtime.cri.client import CRIError
from shared.store import DesiredPod, PodRuntime, PodVolume, Store

log = logging.getLogger(__name__)

MANAGED = {L.MANAGED_BY: "true"}
# Small trees of projected files: the kubelet measures them with du, so do we (bounded, cached).
WALKED_PLUGINS = frozenset({CONFIG_MAP, SECRET, DOWNWARD_API, PROJECTED})
# No du of big trees per request: walks stop after this many entries.
VOLUME_WALK_LIMIT = 10_000
LOG_WALK_LIMIT = 1_000
# A volume with a filesystem of its own (CSI, PVC) may be a network mount that hangs statvfs.
MOUNT_STATFS_TIMEOUT = 5.0
# The kubelet's CRI provider drops CPU samples not refreshed for this long.
CPU_CACHE_MAX_AGE = 600.0
# Two reads closer than this keep the previous rate instead of a noisy one from a tiny window.
CPU_MIN_WINDOW = 1.0
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class StatsRuntime(Protocol):
    async def list_pod_sandbox(self, labels: dict[str, str] | None = None) -> list[cri.PodSandbox]: ...
    async def list_containers(self, labels: dict[str, str] | None = None,
                              sandbox_id: str | None = None) -> list[cri.Container]: ...
    async def list_container_stats(self, sandbox_id: str | None = None) -> list[cri.ContainerStats]: ...
    async def list_pod_sandbox_stats(self) -> list[cri.PodSandboxStats]: ...


class ImageFsSource(Protocol):
    async def image_fs_info(self) -> cri.ImageFsInfoResponse: ...


class StatsError(RuntimeError):
    """The stats could not be gathered (the runtime did not answer); the message says why."""


@dataclass
class _CpuSample:
    usage: int
    at: float
    rate: int | None
    seen: float


class CpuRates:
    """usageNanoCores from two cumulative CPU samples per key (node, cgroup, container, pod)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, min_window: float = CPU_MIN_WINDOW,
                 max_age: float = CPU_CACHE_MAX_AGE) -> None:
        self._clock = clock
        self.min_window = min_window
        self.max_age = max_age
        self._samples: dict[str, _CpuSample] = {}

    def update(self, key: str, usage_ns: int, at: float) -> int | None:
        """Record a sample taken at `at` (seconds, any clock consistent per key); return the
        rate since the previous sample, or None when there is none to compare with."""
        now = self._clock()
        prev = self._samples.get(key)
        if prev is None or usage_ns < prev.usage:  # new, or the counter restarted
            self._samples[key] = _CpuSample(usage_ns, at, None, now)
            return None
        window = at - prev.at
        if window < self.min_window:
            prev.seen = now
            return prev.rate
        rate = int((usage_ns - prev.usage) / window)  # core-ns per second = nano cores
        self._samples[key] = _CpuSample(usage_ns, at, rate, now)
        return rate

    def expire(self) -> None:
        cutoff = self._clock() - self.max_age
        for key in [k for k, s in self._samples.items() if s.seen < cutoff]:
            del self._samples[key]

    def __len__(self) -> int:
        return len(self._samples)


class _MountProbe:
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
                real = _inside(root, p)
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


@dataclass
class _Pass:
    """What one gather shares between its pods."""

    now: float
    full: bool
    snap: Snapshot
    logs_fs: FsInfo | None = None
    layer_fs: dict[str, FsInfo | None] = field(default_factory=dict)  # by writable layer mountpoint
    mount_fs: dict[str, FsInfo | None] = field(default_factory=dict)  # mounted volumes, by real path


@dataclass
class _PodView:
    """What the store knows about one pod."""

    log_dir: str = ""
    images: dict[str, str] = field(default_factory=dict)  # runtime container id -> spec image
    volume_specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> v1 Volume
    volumes: list[PodVolume] = field(default_factory=list)


def _compact(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _fs(fs: FsInfo | None, time_: float, used: int | None = None, inodes_used: int | None = None) -> dict[str, Any]:
    """An FsStats: capacity figures of the filesystem, usage of what is measured on it."""
    return _compact({"time": time_, "availableBytes": fs.available if fs else None,
                     "capacityBytes": fs.capacity if fs else None, "usedBytes": used,
                     "inodesFree": fs.inodes_free if fs else None, "inodes": fs.inodes if fs else None,
                     "inodesUsed": inodes_used})


def _u64(msg: Any, name: str) -> int | None:
    return getattr(msg, name).value if msg.HasField(name) else None


def _ts(ns: int, default: float) -> float:
    return ns / 1e9 if ns > 0 else default


class StatsProvider:
    """Gathers the node's and its pods' resource usage for the kubelet API's stats endpoints."""

    def __init__(self, runtime: StatsRuntime, images: ImageFsSource, store: Store, settings: NodeSettings, *,
                 cgroups: CgroupReader | None = None, proc: str | Path = "/proc",
                 machine: MachineSpec | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.images = images
        self.store = store
        self.settings = settings
        self.cgroups = cgroups or CgroupReader()
        self.proc = Path(proc)
        self.machine = machine or MachineSpec(MachineFacts(proc=self.proc))
        self.rates = CpuRates(clock)
        self._clock = clock
        self.sandbox_stats = SandboxStatsCache(runtime, clock=clock)
        self._mounts = _MountProbe()
        self._walks: dict[str, tuple[TreeUsage | None, float]] = {}

    # -- public API --------------------------------------------------------------------------

    async def close(self) -> None:
        await self.sandbox_stats.close()

    async def summary(self) -> dict[str, Any]:
        """GET /stats/summary: the Summary (stats/v1alpha1) as JSON-ready data."""
        body: dict[str, Any] = summary_json((await self.snapshot(full=True)).summary)
        return body

    async def resource_metrics(self) -> bytes:
        """GET /metrics/resource: what metrics-server scrapes, text format 0.0.4."""
        try:
            snap = await self.snapshot(full=False)
        except StatsError as exc:
            log.warning("resource metrics: %s", exc)
            return resource_metrics.render_resource(None)
        return resource_metrics.render_resource(snap.summary)

    async def cadvisor_metrics(self) -> bytes:
        """GET /metrics/cadvisor: cAdvisor's container and machine series."""
        try:
            spec = self.machine_spec()
        except (OSError, ValueError) as exc:
            log.warning("machine info: %s", exc)
            spec = None
        try:
            snap = await self.snapshot(full=True)
        except StatsError as exc:
            log.warning("cadvisor metrics: %s", exc)
            snap = None
        return resource_metrics.render_cadvisor(snap, spec, self.machine.timestamp)

    def machine_spec(self) -> dict[str, Any]:
        """GET /spec: cAdvisor's MachineInfo."""
        return self.machine.get()

    # -- gathering ---------------------------------------------------------------------------

    async def snapshot(self, full: bool = True) -> Snapshot:
        """One gather. full=False is the CPU-and-memory subset /metrics/resource needs (no
        filesystems, volumes, logs or network), as the kubelet's GetCPUAndMemoryStats."""
        now = time.time()
        try:
            sandboxes, containers, cstats, sandbox_stats, image_fs = await asyncio.gather(
                self.runtime.list_pod_sandbox(MANAGED), self.runtime.list_containers(MANAGED),
                self.runtime.list_container_stats(), self.sandbox_stats.get(),
                self._image_fs(now) if full else _no_image_fs())
        except CRIError as exc:
            raise StatsError(f"failed to list pod stats: {exc}") from exc
        g = _Pass(now, full, Snapshot(time=now, summary={}))
        node = self._node(g, *image_fs)
        ready = [s for s in sandboxes if s.state == cri.SANDBOX_READY]
        views = self._store_views({_pod_uid(s) for s in ready}) if full else {}
        if full:
            g.logs_fs = statfs_nearest(self.settings.kubelet.pod_logs_dir)
            g.mount_fs = await self._mounts.statfs(
                [r.host_path for v in views.values() for r in v.volumes if _is_mount(r) and r.host_path],
                self.settings.root_dir)
        pods = [self._pod(g, s, containers, cstats, sandbox_stats, views.get(_pod_uid(s), _PodView())) for s in ready]
        pods.sort(key=lambda p: (p["podRef"]["namespace"], p["podRef"]["name"]))
        g.snap.summary = {"node": node, "pods": pods}
        self.rates.expire()
        return g.snap

    async def _image_fs(self, now: float) -> tuple[dict[str, Any] | None, str]:
        """(imageFs stats, its mountpoint): CRI's usage, statvfs of its mountpoint for the rest."""
        try:
            resp = await self.images.image_fs_info()
        except CRIError as exc:
            log.warning("image filesystem stats: %s", exc)
            return None, ""
        if not resp.image_filesystems:
            return None, ""
        usage = resp.image_filesystems[0]  # the kubelet reports the first one
        mountpoint = usage.fs_id.mountpoint
        fs = statfs(mountpoint) if mountpoint else None
        return _fs(fs, _ts(usage.timestamp, now), _u64(usage, "used_bytes"), _u64(usage, "inodes_used")), mountpoint

    # -- node --------------------------------------------------------------------------------

    def _node(self, g: _Pass, image_fs: dict[str, Any] | None, image_mountpoint: str) -> dict[str, Any]:
        now = g.now
        root = self.cgroups.sample("/")
        try:
            capacity = memory_capacity_bytes(str(self.proc / "meminfo"))
        except (OSError, RuntimeError):
            capacity = None
        try:
            started = boot_time(str(self.proc / "stat"))
        except (OSError, RuntimeError, ValueError):
            started = None
        node: dict[str, Any] = {"nodeName": self.settings.node_name,
                                "systemContainers": self._system_containers() or None,
                                "startTime": started,
                                "cpu": self._cgroup_cpu("/", root),
                                "memory": self._cgroup_memory(root, capacity)}
        if g.full:
            node["network"] = self._node_network(now)
            root_fs = statfs(self.settings.root_dir)
            node["fs"] = _fs(root_fs, now, root_fs.used, root_fs.inodes_used) if root_fs else None
            node["runtime"] = {"imageFs": image_fs} if image_fs else {}
            limits = rlimit(self.proc)
            node["rlimit"] = _compact({"time": now, "maxpid": limits.get("maxpid"), "curproc": limits.get("curproc")})
            mounts = read_mounts(self.proc / "self/mountinfo")
            for path, stats in ((str(self.settings.root_dir), node["fs"]), (image_mountpoint, image_fs)):
                device = device_of(path, mounts) if path and stats else ""
                if device and stats and device not in {d for d, _ in g.snap.node_fs}:
                    g.snap.node_fs.append((device, stats))
            g.snap.image_device = device_of(image_mountpoint, mounts) if image_mountpoint else ""
        return _compact(node)

    def _system_containers(self) -> list[dict[str, Any]]:
        """The kubelet's "pods" system container: the /kubepods cgroup all pods live under."""
        kubepods = self.cgroups.kubepods()
        if not self.cgroups.exists(kubepods):
            return []
        sample = self.cgroups.sample(kubepods)
        return [_compact({"name": "pods", "startTime": self.cgroups.created(kubepods),
                          "cpu": self._cgroup_cpu(kubepods, sample),
                          "memory": self._cgroup_memory(sample, sample.memory_limit)})]

    def _cgroup_cpu(self, cgroup: str, s: CgroupSample) -> dict[str, Any] | None:
        if s.cpu_usage_ns is None:
            return None
        rate = self.rates.update(f"cgroup:{cgroup}", s.cpu_usage_ns, self._clock())
        return _compact({"time": s.time, "usageNanoCores": rate, "usageCoreNanoSeconds": s.cpu_usage_ns})

    @staticmethod
    def _cgroup_memory(s: CgroupSample, limit: int | None) -> dict[str, Any] | None:
        if s.memory_usage is None:
            return None
        available = max(0, limit - s.working_set) if limit is not None and s.working_set is not None else None
        return _compact({"time": s.time, "availableBytes": available, "usageBytes": s.memory_usage,
                         "workingSetBytes": s.working_set, "rssBytes": s.rss, "pageFaults": s.page_faults,
                         "majorPageFaults": s.major_page_faults})

    def _node_network(self, now: float) -> dict[str, Any] | None:
        interfaces = node_interfaces(self.proc / "net/dev")
        if not interfaces:
            return None
        default = default_route_interface(self.proc / "net/route")
        listed = [{"name": i.name, "rxBytes": i.rx_bytes, "rxErrors": i.rx_errors, "txBytes": i.tx_bytes,
                   "txErrors": i.tx_errors} for i in interfaces]
        # As the kubelet: the default interface's counters inline, every interface listed.
        inline = next((i for i in listed if i["name"] == default), {})
        return {"time": now, **inline, "interfaces": listed}

    # -- pods --------------------------------------------------------------------------------

    def _store_views(self, uids: set[str]) -> dict[str, _PodView]:
        try:
            return self._read_store(uids)
        except SQLAlchemyError as exc:  # the pods' CPU and memory are still worth reporting
            log.warning("stats without volumes and logs: the store cannot be read: %s", exc)
            return {}

    def _read_store(self, uids: set[str]) -> dict[str, _PodView]:
        views = {uid: _PodView() for uid in uids}
        with self.store.session() as s:
            for rt in s.scalars(select(PodRuntime).where(PodRuntime.uid.in_(uids))):
                v = views[rt.uid]
                v.log_dir = rt.log_dir or ""
                for c in rt.containers or []:
                    cid = runtime_container_id(str(c.get("container_id") or ""))
                    if cid and c.get("image"):
                        v.images[cid] = str(c["image"])
            for d in s.scalars(select(DesiredPod).where(DesiredPod.uid.in_(uids))):
                spec_volumes = ((d.manifest or {}).get("spec") or {}).get("volumes") or []
                views[d.uid].volume_specs = {v["name"]: v for v in spec_volumes
                                             if isinstance(v, dict) and isinstance(v.get("name"), str)}
            for row in s.scalars(select(PodVolume).where(PodVolume.pod_uid.in_(uids), PodVolume.ready.is_(True))):
                views[row.pod_uid].volumes.append(row)
        return views

    def _pod(self, g: _Pass, sandbox: cri.PodSandbox, containers: list[cri.Container],
             cstats: list[cri.ContainerStats], sandbox_stats: dict[str, cri.PodSandboxStats] | None,
             view: _PodView) -> dict[str, Any]:
        now, full, snap = g.now, g.full, g.snap
        uid, name, namespace = _pod_uid(sandbox), _label(sandbox, L.POD_NAME), _label(sandbox, L.POD_NAMESPACE)
        pod_cgroup = self.cgroups.pod_cgroup(uid) or f"{KUBEPODS}/pod{uid}"
        snap.pods[uid] = PodIds(sandbox.id, pod_cgroup)
        running = {c.id: c for c in containers
                   if c.pod_sandbox_id == sandbox.id and c.state == cri.CONTAINER_RUNNING}
        log_dir = self._log_dir(view, namespace, name, uid) if full else None
        out_containers = []
        for st in cstats:
            c = running.get(st.attributes.id)
            if c is None:
                continue
            cname = st.attributes.metadata.name or c.metadata.name
            cpu = st.cpu if st.HasField("cpu") else None
            entry: dict[str, Any] = {"name": cname, "startTime": _ts(c.created_at, 0.0) or None,
                                     "cpu": self._cri_cpu(f"container:{c.id}", cpu, now),
                                     "memory": _cri_memory(st.memory if st.HasField("memory") else None, now)}
            if full:
                entry["rootfs"] = self._rootfs(st, g.layer_fs)
                entry["logs"] = self._container_logs(log_dir, cname, g.logs_fs, now)
            out_containers.append(_compact(entry))
            snap.containers[(uid, cname)] = ContainerIds(c.id, view.images.get(c.id) or c.image.image,
                                                         container_cgroup(pod_cgroup, c.id))
        out_containers.sort(key=lambda e: e["name"])

        pod: dict[str, Any] = {"podRef": {"name": name, "namespace": namespace, "uid": uid},
                               "startTime": _ts(sandbox.created_at, 0.0) or None,
                               "containers": out_containers}
        linux = sandbox_stats[sandbox.id].linux if sandbox_stats and sandbox.id in sandbox_stats else None
        if linux is not None and linux.HasField("cpu"):
            pod["cpu"] = self._cri_cpu(f"pod:{sandbox.id}", linux.cpu, now)
        if linux is not None and linux.HasField("memory"):
            pod["memory"] = _cri_memory(linux.memory, now)
        if "cpu" not in pod and "memory" not in pod:
            pod.update(_sum_cpu_memory(out_containers))
        if full and linux is not None and linux.HasField("network"):
            pod["network"] = _cri_network(linux.network, now)
        if full:
            volumes, ephemeral = self._volumes(view, namespace, now, g.mount_fs)
            pod["volume"] = volumes or None
            if g.logs_fs is not None:
                pod["ephemeral-storage"] = _ephemeral(out_containers, ephemeral,
                                                      self._pod_log_files(log_dir, g.logs_fs, now), g.logs_fs, now)
        if linux is not None and linux.HasField("process") and linux.process.HasField("process_count"):
            pod["process_stats"] = {"process_count": linux.process.process_count.value}
        return _compact(pod)

    def _cri_cpu(self, key: str, cpu: cri.CpuUsage | None, now: float) -> dict[str, Any]:
        if cpu is None:
            return {"time": now, "usageNanoCores": 0, "usageCoreNanoSeconds": 0}
        at = _ts(cpu.timestamp, now)
        total = _u64(cpu, "usage_core_nano_seconds")
        rate = self.rates.update(key, total, at) if total is not None else None
        if rate is None:
            rate = _u64(cpu, "usage_nano_cores")  # the runtime's own figure, where it has one
        return _compact({"time": at, "usageNanoCores": rate, "usageCoreNanoSeconds": total})

    def _rootfs(self, st: cri.ContainerStats, cache: dict[str, FsInfo | None]) -> dict[str, Any] | None:
        if not st.HasField("writable_layer"):
            return None
        layer = st.writable_layer
        mountpoint = layer.fs_id.mountpoint
        if mountpoint and mountpoint not in cache:
            cache[mountpoint] = statfs(mountpoint)
        return _fs(cache.get(mountpoint), _ts(layer.timestamp, time.time()), _u64(layer, "used_bytes"),
                   _u64(layer, "inodes_used"))

    def _log_dir(self, view: _PodView, namespace: str, name: str, uid: str) -> Path | None:
        """The pod's log dir, only if it is inside the pod logs root (it comes from a store row)."""
        root = os.path.realpath(self.settings.kubelet.pod_logs_dir)
        candidate = view.log_dir or L.pod_log_dir(self.settings.kubelet.pod_logs_dir, namespace, name, uid)
        real = os.path.realpath(candidate)
        if not real.startswith(root.rstrip("/") + "/"):
            log.warning("pod %s/%s: log dir %s is outside %s, not measured", namespace, name, candidate, root)
            return None
        return Path(real)

    @staticmethod
    def _container_logs(log_dir: Path | None, container: str, logs_fs: FsInfo | None,
                        now: float) -> dict[str, Any] | None:
        if log_dir is None or not _NAME.match(container):
            return None
        usage = tree_usage(log_dir / container, LOG_WALK_LIMIT)
        if usage is None:
            return None
        return _fs(logs_fs, now, usage.bytes, usage.inodes)

    @staticmethod
    def _pod_log_files(log_dir: Path | None, logs_fs: FsInfo, now: float) -> dict[str, Any] | None:
        """Files right in the pod log dir (some runtimes keep pod-level logs there)."""
        if log_dir is None:
            return None
        used = inodes = 0
        try:
            with os.scandir(log_dir) as it:
                for entry in it:
                    if entry.is_file(follow_symlinks=False):
                        used += entry.stat(follow_symlinks=False).st_blocks * 512
                        inodes += 1
        except OSError:
            return None
        return _fs(logs_fs, now, used, inodes)

    # -- volumes -----------------------------------------------------------------------------

    def _volumes(self, view: _PodView, namespace: str, now: float,
                 mount_fs: dict[str, FsInfo | None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(all volume stats, ephemeral first; the ephemeral ones) as the kubelet's volume
        stat calculator reports them: hostPath volumes have no metrics and are left out."""
        ephemeral, persistent = [], []
        for row in sorted(view.volumes, key=lambda r: r.name):
            if row.plugin == HOST_PATH or not row.host_path:
                continue
            path: str | None
            if _is_mount(row):
                path, fs = row.host_path, mount_fs.get(row.host_path)
            else:
                path = _inside(self.settings.root_dir, row.host_path)
                fs = statfs(path) if path else None
            if fs is None or path is None:
                continue
            if row.plugin == EMPTY_DIR:
                # used_bytes is the volume service's full du every volumeStatsAggPeriod
                walk = self._walk(path)
                used, inodes_used = row.used_bytes, walk.inodes if walk else 0
            elif row.plugin in WALKED_PLUGINS:
                walk = self._walk(path)
                used, inodes_used = (walk.bytes, walk.inodes) if walk else (0, 0)
            else:  # a mounted filesystem of its own (CSI, PVC)
                used, inodes_used = fs.used, fs.inodes_used
            spec = view.volume_specs.get(row.name, {})
            claim = (spec.get("persistentVolumeClaim") or {}).get("claimName")
            entry = {"time": now, "availableBytes": fs.available, "capacityBytes": fs.capacity, "usedBytes": used,
                     "inodesFree": fs.inodes_free, "inodes": fs.inodes, "inodesUsed": inodes_used, "name": row.name}
            if isinstance(claim, str) and claim:
                entry["pvcRef"] = {"name": claim, "namespace": namespace}
            if _is_ephemeral(row.plugin, spec):
                ephemeral.append(entry)
            else:
                persistent.append(entry)
        return ephemeral + persistent, ephemeral

    def _walk(self, path: str) -> TreeUsage | None:
        """A bounded tree walk, reused for volumeStatsAggPeriod (the kubelet's cadence)."""
        period = self.settings.kubelet.volume_stats_agg_period
        now = self._clock()
        cached = self._walks.get(path)
        if cached is not None and now - cached[1] < period:
            return cached[0]
        if len(self._walks) > 4096:  # volumes come and go: forget the stale ones
            self._walks = {p: v for p, v in self._walks.items() if now - v[1] < period}
        usage = tree_usage(path, VOLUME_WALK_LIMIT)
        self._walks[path] = (usage, now)
        return usage


def _inside(root: str | Path, path: str) -> str | None:
    """path resolved, if that is inside root (volume paths come from store rows)."""
    top = os.path.realpath(root).rstrip("/") + "/"
    real = os.path.realpath(path)
    if not real.startswith(top):
        log.warning("%s resolves to %s, outside %s: not measured", path, real, top)
        return None
    return real


async def _no_image_fs() -> tuple[None, str]:
    return None, ""


def _label(sandbox: cri.PodSandbox, key: str) -> str:
    fallback = {L.POD_NAME: sandbox.metadata.name, L.POD_NAMESPACE: sandbox.metadata.namespace,
                L.POD_UID: sandbox.metadata.uid}[key]
    return sandbox.labels.get(key) or fallback


def _pod_uid(sandbox: cri.PodSandbox) -> str:
    return _label(sandbox, L.POD_UID)


def _cri_memory(mem: cri.MemoryUsage | None, now: float) -> dict[str, Any]:
    if mem is None:
        return {"time": now, "workingSetBytes": 0}
    return _compact({"time": _ts(mem.timestamp, now), "availableBytes": _u64(mem, "available_bytes"),
                     "usageBytes": _u64(mem, "usage_bytes"), "workingSetBytes": _u64(mem, "working_set_bytes"),
                     "rssBytes": _u64(mem, "rss_bytes"), "pageFaults": _u64(mem, "page_faults"),
                     "majorPageFaults": _u64(mem, "major_page_faults")})


def _cri_interface(i: cri.NetworkInterfaceUsage) -> dict[str, Any]:
    return _compact({"name": i.name, "rxBytes": _u64(i, "rx_bytes"), "rxErrors": _u64(i, "rx_errors"),
                     "txBytes": _u64(i, "tx_bytes"), "txErrors": _u64(i, "tx_errors")})


def _cri_network(net: cri.NetworkUsage, now: float) -> dict[str, Any]:
    inline = _cri_interface(net.default_interface) if net.HasField("default_interface") else {}
    return _compact({"time": _ts(net.timestamp, now), **inline,
                     "interfaces": [_cri_interface(i) for i in net.interfaces] or None})


def _sum_cpu_memory(containers: list[dict[str, Any]]) -> dict[str, Any]:
    """Pod CPU and memory as the sum of its containers' (the kubelet's fallback without a pod
    cgroup reading): every figure summed, a missing one counting as zero."""
    out: dict[str, Any] = {}
    cpus = [c["cpu"] for c in containers if "cpu" in c]
    if cpus:
        out["cpu"] = {"time": cpus[-1]["time"], "usageNanoCores": sum(c.get("usageNanoCores", 0) for c in cpus),
                      "usageCoreNanoSeconds": sum(c.get("usageCoreNanoSeconds", 0) for c in cpus)}
    mems = [c["memory"] for c in containers if "memory" in c]
    if mems:
        out["memory"] = {"time": mems[-1]["time"]} | {
            k: sum(m.get(k, 0) for m in mems)
            for k in ("availableBytes", "usageBytes", "workingSetBytes", "rssBytes", "pageFaults", "majorPageFaults")}
    return out


def _is_mount(row: PodVolume) -> bool:
    """A volume that is a filesystem of its own (CSI, PVC), not a directory on the node's."""
    return row.plugin != EMPTY_DIR and row.plugin not in WALKED_PLUGINS and row.plugin != HOST_PATH


def _is_ephemeral(plugin: str, spec: dict[str, Any]) -> bool:
    """The kubelet's isVolumeEphemeral: disk-backed emptyDir, configMap and gitRepo volumes
    count toward the pod's ephemeral storage."""
    if plugin == EMPTY_DIR:
        return not ((spec.get("emptyDir") or {}).get("medium") or "")
    return plugin == CONFIG_MAP or "gitRepo" in spec


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else a + b


def _ephemeral(containers: list[dict[str, Any]], volumes: list[dict[str, Any]], pod_logs: dict[str, Any] | None,
               logs_fs: FsInfo, now: float) -> dict[str, Any]:
    """The kubelet's calcEphemeralStorage: containers' writable layers and logs, disk-backed
    local volumes and pod-level log files, on the node filesystem."""
    used: int | None = None
    inodes: int | None = None
    latest = now
    parts = []
    for c in containers:
        if "rootfs" in c:  # logs count only with a rootfs, as in the kubelet
            parts.append(c["rootfs"])
            if "logs" in c:
                parts.append(c["logs"])
    parts += volumes + ([pod_logs] if pod_logs else [])
    for p in parts:
        used = _add(used, p.get("usedBytes"))
        inodes = _add(inodes, p.get("inodesUsed"))
        latest = max(latest, p.get("time") or 0)
    return _fs(logs_fs, latest, used, inodes)
