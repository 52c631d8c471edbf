"""Each pod's part of the Summary: its containers' CPU, memory, writable layer and logs from CRI
(ListContainerStats, and ListPodSandboxStats where the runtime has it), its volumes, and its
ephemeral storage as the kubelet adds it up."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import Any

from cri_api.v1 import api_pb2 as cri
from sqlalchemy import select

from services.node_api.hostfs import FsInfo, statfs
from services.node_api.snapshot import ContainerIds, PodIds
from services.node_api.stats.cpu_rates import CpuRates
from services.node_api.stats.summary_fields import Pass, add_psi, add_swap, compact, cri_time, fs_stats, u64
from services.node_api.stats.volumes import PodView, VolumeStats
from shared.config.settings import NodeSettings
from shared.host.cgroups import CgroupReader
from shared.host.disk_usage import tree_usage
from shared.model.cgroup_names import container_cgroup
from shared.model.container_id import runtime_container_id
from shared.runtime.cri import labels as L
from shared.store import DesiredPod, PodRuntime, PodVolume, Store

log = logging.getLogger(__name__)

LOG_WALK_LIMIT = 1_000
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def read_views(store: Store, uids: set[str]) -> dict[str, PodView]:
    """What the store knows of these pods: log dir, spec images, volume specs, ready volumes."""
    views = {uid: PodView() for uid in uids}
    with store.session() as s:
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


def label(sandbox: cri.PodSandbox, key: str) -> str:
    fallback = {L.POD_NAME: sandbox.metadata.name, L.POD_NAMESPACE: sandbox.metadata.namespace,
                L.POD_UID: sandbox.metadata.uid}[key]
    return sandbox.labels.get(key) or fallback


def pod_uid(sandbox: cri.PodSandbox) -> str:
    return label(sandbox, L.POD_UID)


class PodStats:
    def __init__(self, settings: NodeSettings, cgroups: CgroupReader, rates: CpuRates, volumes: VolumeStats) -> None:
        self.settings = settings
        self.cgroups = cgroups
        self.rates = rates
        self.volumes = volumes

    def pod(self, g: Pass, sandbox: cri.PodSandbox, running: list[cri.Container],
            cstats: dict[str, cri.ContainerStats], sandbox_stats: dict[str, cri.PodSandboxStats] | None,
            view: PodView) -> dict[str, Any]:
        """running: the sandbox's running containers (running_by_sandbox); cstats: the
        runtime's stats by container ID (stats_by_container)."""
        now, full = g.now, g.full
        uid, name, namespace = pod_uid(sandbox), label(sandbox, L.POD_NAME), label(sandbox, L.POD_NAMESPACE)
        found = self.cgroups.pod_cgroup(uid)
        pod_cgroup = found or f"{self.cgroups.pods_cgroup}/pod{uid}"
        g.snap.pods[uid] = PodIds(sandbox.id, pod_cgroup)
        log_dir = self._log_dir(view, namespace, name, uid) if full else None
        out_containers = self._containers(g, sandbox, running, cstats, view, pod_cgroup, log_dir)
        pod: dict[str, Any] = {"podRef": {"name": name, "namespace": namespace, "uid": uid},
                               "startTime": cri_time(sandbox.created_at, 0.0) or None,
                               "containers": out_containers}
        linux = sandbox_stats[sandbox.id].linux if sandbox_stats and sandbox.id in sandbox_stats else None
        if linux is not None and linux.HasField("cpu"):
            pod["cpu"] = self._cri_cpu(f"pod:{sandbox.id}", linux.cpu, now)
        if linux is not None and linux.HasField("memory"):
            pod["memory"] = cri_memory(linux.memory, now)
        if "cpu" not in pod and "memory" not in pod:
            pod.update(sum_cpu_memory(out_containers))
        if found is not None:
            add_psi(pod, self.cgroups.psi(found), now)
            add_swap(pod, self.cgroups.swap(found), now)
            _limited(pod, self.cgroups.memory_limit(found))
        if full and linux is not None and linux.HasField("network"):
            pod["network"] = cri_network(linux.network, now)
        if full:
            volumes, ephemeral = self.volumes.volumes(view, namespace, now, g.mount_fs)
            pod["volume"] = volumes or None
            if g.logs_fs is not None:
                pod["ephemeral-storage"] = ephemeral_storage(out_containers, ephemeral,
                                                             _pod_log_files(log_dir, g.logs_fs, now), g.logs_fs, now)
        if linux is not None and linux.HasField("process") and linux.process.HasField("process_count"):
            pod["process_stats"] = {"process_count": linux.process.process_count.value}
        return compact(pod)

    def _containers(self, g: Pass, sandbox: cri.PodSandbox, running: list[cri.Container],
                    cstats: dict[str, cri.ContainerStats], view: PodView, pod_cgroup: str,
                    log_dir: Path | None) -> list[dict[str, Any]]:
        """The pod's running containers with stats, by name; each noted in the pass's snapshot."""
        uid = pod_uid(sandbox)
        out = []
        for c in running:
            st = cstats.get(c.id)
            if st is None:
                continue
            cname = st.attributes.metadata.name or c.metadata.name
            cpu = st.cpu if st.HasField("cpu") else None
            entry: dict[str, Any] = {"name": cname, "startTime": cri_time(c.created_at, 0.0) or None,
                                     "cpu": self._cri_cpu(f"container:{c.id}", cpu, g.now),
                                     "memory": cri_memory(st.memory if st.HasField("memory") else None, g.now)}
            if g.full:
                entry["rootfs"] = _rootfs(st, g.layer_fs)
                entry["logs"] = _container_logs(log_dir, cname, g.logs_fs, g.now)
            cgroup = container_cgroup(pod_cgroup, c.id)
            add_psi(entry, self.cgroups.psi(cgroup), g.now)
            add_swap(entry, self.cgroups.swap(cgroup), g.now)  # None (nothing added) where there is no cgroup
            out.append(compact(entry))
            g.snap.containers[(uid, cname)] = ContainerIds(c.id, view.images.get(c.id) or c.image.image, cgroup)
        out.sort(key=lambda e: e["name"])
        return out

    def _cri_cpu(self, key: str, cpu: cri.CpuUsage | None, now: float) -> dict[str, Any]:
        if cpu is None:
            return {"time": now, "usageNanoCores": 0, "usageCoreNanoSeconds": 0}
        at = cri_time(cpu.timestamp, now)
        total = u64(cpu, "usage_core_nano_seconds")
        rate = self.rates.update(key, total, at) if total is not None else None
        if rate is None:
            rate = u64(cpu, "usage_nano_cores")  # the runtime's own figure, where it has one
        return compact({"time": at, "usageNanoCores": rate, "usageCoreNanoSeconds": total})

    def _log_dir(self, view: PodView, namespace: str, name: str, uid: str) -> Path | None:
        """The pod's log dir, only if it is inside the pod logs root (it comes from a store row)."""
        root = os.path.realpath(self.settings.kubelet.pod_logs_dir)
        candidate = view.log_dir or L.pod_log_dir(self.settings.kubelet.pod_logs_dir, namespace, name, uid)
        real = os.path.realpath(candidate)
        if not real.startswith(root.rstrip("/") + "/"):
            log.warning("pod %s/%s: log dir %s is outside %s, not measured", namespace, name, candidate, root)
            return None
        return Path(real)


def running_by_sandbox(containers: list[cri.Container]) -> dict[str, list[cri.Container]]:
    """Running containers by sandbox ID: each pod looks up its own, rather than every pod
    going through every container (at 250 pods that was most of a stats/summary)."""
    out: dict[str, list[cri.Container]] = {}
    for c in containers:
        if c.state == cri.CONTAINER_RUNNING:
            out.setdefault(c.pod_sandbox_id, []).append(c)
    return out


def stats_by_container(cstats: list[cri.ContainerStats]) -> dict[str, cri.ContainerStats]:
    return {st.attributes.id: st for st in cstats}


def _rootfs(st: cri.ContainerStats, cache: dict[str, FsInfo | None]) -> dict[str, Any] | None:
    if not st.HasField("writable_layer"):
        return None
    layer = st.writable_layer
    mountpoint = layer.fs_id.mountpoint
    if mountpoint and mountpoint not in cache:
        cache[mountpoint] = statfs(mountpoint)
    return fs_stats(cache.get(mountpoint), cri_time(layer.timestamp, time.time()), u64(layer, "used_bytes"),
                    u64(layer, "inodes_used"))


def _container_logs(log_dir: Path | None, container: str, logs_fs: FsInfo | None, now: float) -> dict[str, Any] | None:
    if log_dir is None or not _NAME.match(container):
        return None
    usage = tree_usage(log_dir / container, LOG_WALK_LIMIT)
    if usage is None:
        return None
    return fs_stats(logs_fs, now, usage.bytes, usage.inodes)


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
    return fs_stats(logs_fs, now, used, inodes)


def _limited(stats: dict[str, Any], limit: int | None) -> None:
    """A pod's availableBytes only under a memory limit, as the kubelet reports it: the
    runtime's 0 for a pod cgroup without one (containerd's) is no figure at all. (A container's
    stays: the kubelet reports one for a container without a limit too.)"""
    if limit is None and isinstance(stats.get("memory"), dict):
        stats["memory"].pop("availableBytes", None)


def cri_memory(mem: cri.MemoryUsage | None, now: float) -> dict[str, Any]:
    if mem is None:
        return {"time": now, "workingSetBytes": 0}
    return compact({"time": cri_time(mem.timestamp, now), "availableBytes": u64(mem, "available_bytes"),
                    "usageBytes": u64(mem, "usage_bytes"), "workingSetBytes": u64(mem, "working_set_bytes"),
                    "rssBytes": u64(mem, "rss_bytes"), "pageFaults": u64(mem, "page_faults"),
                    "majorPageFaults": u64(mem, "major_page_faults")})


def _cri_interface(i: cri.NetworkInterfaceUsage) -> dict[str, Any]:
    return compact({"name": i.name, "rxBytes": u64(i, "rx_bytes"), "rxErrors": u64(i, "rx_errors"),
                    "txBytes": u64(i, "tx_bytes"), "txErrors": u64(i, "tx_errors")})


def cri_network(net: cri.NetworkUsage, now: float) -> dict[str, Any]:
    inline = _cri_interface(net.default_interface) if net.HasField("default_interface") else {}
    return compact({"time": cri_time(net.timestamp, now), **inline,
                    "interfaces": [_cri_interface(i) for i in net.interfaces] or None})


def sum_cpu_memory(containers: list[dict[str, Any]]) -> dict[str, Any]:
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


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else a + b


def ephemeral_storage(containers: list[dict[str, Any]], volumes: list[dict[str, Any]],
                      pod_logs: dict[str, Any] | None, logs_fs: FsInfo, now: float) -> dict[str, Any]:
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
    return fs_stats(logs_fs, latest, used, inodes)
