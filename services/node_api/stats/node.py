"""The node's part of the Summary: CPU and memory of the root cgroup and of the "kubelet" (the node
agent's cgroup) and "pods" (/kubepods) system containers, with their pressure stall figures on
cgroup v2, the node's network from /proc, its root and image filesystems and rlimit."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Protocol

from cri_api.v1 import api_pb2 as cri

from services.node_api.hostfs import device_of, node_interfaces, read_mounts, rlimit, statfs
from services.node_api.stats.cpu_rates import CpuRates
from services.node_api.stats.summary_fields import Pass, add_psi, add_swap, compact, cri_time, fs_stats, u64
from shared.config.settings import NodeSettings
from shared.host.agent_cgroup import own_agent_cgroup
from shared.host.cgroups import CgroupReader, CgroupSample
from shared.host.facts import boot_time, memory_capacity_bytes
from shared.runtime.cri.client import CRIError

log = logging.getLogger(__name__)

DEFAULT_INTERFACE = "eth0"  # the kubelet's defaultNetworkInterfaceName


class ImageFsSource(Protocol):
    async def image_fs_info(self) -> cri.ImageFsInfoResponse: ...


class NodeStats:
    def __init__(self, settings: NodeSettings, cgroups: CgroupReader, proc: Path, rates: CpuRates,
                 clock: Callable[[], float]) -> None:
        self.settings = settings
        self.cgroups = cgroups
        self.proc = proc
        self.rates = rates
        self._clock = clock
        # The "kubelet" system container: kubeletCgroups where it is set (every service moves
        # there), else shared/host/agent_cgroup.py's; this process does not move otherwise.
        self.agent_cgroup = settings.kubelet.kubelet_cgroups or own_agent_cgroup(cgroups.version, proc)

    async def image_fs(self, images: ImageFsSource, now: float) -> tuple[dict[str, Any] | None, str,
                                                                          dict[str, Any] | None]:
        """(imageFs stats, its mountpoint, containerFs stats): CRI's usage, statvfs of the
        mountpoint for the rest. containerFs, where the containers' writable layers are, is the
        image filesystem unless the runtime names one of its own (a split image filesystem), as
        the kubelet 1.37 reports it."""
        try:
            resp = await images.image_fs_info()
        except CRIError as exc:
            log.warning("image filesystem stats: %s", exc)
            return None, "", None
        if not resp.image_filesystems:
            return None, "", None

        def stats(usage: cri.FilesystemUsage) -> dict[str, Any]:
            mountpoint = usage.fs_id.mountpoint
            fs = statfs(mountpoint) if mountpoint else None
            return fs_stats(fs, cri_time(usage.timestamp, now), u64(usage, "used_bytes"), u64(usage, "inodes_used"))
        image = resp.image_filesystems[0]  # the kubelet reports the first one
        image_stats = stats(image)
        container_stats = stats(resp.container_filesystems[0]) if resp.container_filesystems else image_stats
        return image_stats, image.fs_id.mountpoint, container_stats

    def node(self, g: Pass, image_fs: dict[str, Any] | None, image_mountpoint: str,
             container_fs: dict[str, Any] | None = None) -> dict[str, Any]:
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
                                "cpu": self.cgroup_cpu("/", root),
                                "memory": self.cgroup_memory(root, capacity)}
        add_psi(node, self.cgroups.psi("/"), root.time)
        add_swap(node, self.cgroups.swap("/"), root.time)
        if g.full:
            node["network"] = self._network(now)
            root_fs = statfs(self.settings.root_dir)
            node["fs"] = fs_stats(root_fs, now, root_fs.used, root_fs.inodes_used) if root_fs else None
            node["runtime"] = compact({"imageFs": image_fs, "containerFs": container_fs})
            limits = rlimit(self.proc)
            node["rlimit"] = compact({"time": now, "maxpid": limits.get("maxpid"), "curproc": limits.get("curproc")})
            mounts = read_mounts(self.proc / "self/mountinfo")
            for path, stats in ((str(self.settings.root_dir), node["fs"]), (image_mountpoint, image_fs)):
                device = device_of(path, mounts) if path and stats else ""
                if device and stats and device not in {d for d, _ in g.snap.node_fs}:
                    g.snap.node_fs.append((device, stats))
            g.snap.image_device = device_of(image_mountpoint, mounts) if image_mountpoint else ""
        return compact(node)

    def prime(self) -> None:
        """Note the CPU use of the node, the pods' cgroup and the kubelet system container, for
        the first request's rates."""
        for cgroup in ("/", self.cgroups.kubepods(), self.agent_cgroup):
            if cgroup is not None and self._present(cgroup):
                self.cgroup_cpu(cgroup, self.cgroups.sample(cgroup))

    def _present(self, cgroup: str) -> bool:
        try:
            return self.cgroups.exists(cgroup)
        except ValueError:  # not a cgroup name
            return False

    def _system_containers(self) -> list[dict[str, Any]]:
        """The kubelet's system containers: "kubelet", the node agent's own cgroup (where there is
        one), and "pods", the /kubepods cgroup all pods live under."""
        out = []
        for name, cgroup in (("kubelet", self.agent_cgroup), ("pods", self.cgroups.kubepods())):
            if cgroup is None or not self._present(cgroup):
                continue
            sample = self.cgroups.sample(cgroup)
            entry = {"name": name, "startTime": self.cgroups.created(cgroup), "cpu": self.cgroup_cpu(cgroup, sample),
                     "memory": self.cgroup_memory(sample, sample.memory_limit)}
            add_swap(entry, self.cgroups.swap(cgroup), sample.time)
            out.append(compact(add_psi(entry, self.cgroups.psi(cgroup), sample.time)))
        return out

    def cgroup_cpu(self, cgroup: str, s: CgroupSample) -> dict[str, Any] | None:
        if s.cpu_usage_ns is None:
            return None
        rate = self.rates.update(f"cgroup:{cgroup}", s.cpu_usage_ns, self._clock())
        return compact({"time": s.time, "usageNanoCores": rate, "usageCoreNanoSeconds": s.cpu_usage_ns})

    @staticmethod
    def cgroup_memory(s: CgroupSample, limit: int | None) -> dict[str, Any] | None:
        if s.memory_usage is None:
            return None
        available = max(0, limit - s.working_set) if limit is not None and s.working_set is not None else None
        return compact({"time": s.time, "availableBytes": available, "usageBytes": s.memory_usage,
                        "workingSetBytes": s.working_set, "rssBytes": s.rss, "pageFaults": s.page_faults,
                        "majorPageFaults": s.major_page_faults})

    def _network(self, now: float) -> dict[str, Any] | None:
        interfaces = node_interfaces(self.proc / "net/dev")
        if not interfaces:
            return None
        listed = [{"name": i.name, "rxBytes": i.rx_bytes, "rxErrors": i.rx_errors, "txBytes": i.tx_bytes,
                   "txErrors": i.tx_errors} for i in interfaces]
        # As the kubelet: every interface listed, and eth0's counters inline (the kubelet's
        # default interface is eth0 by name, whichever interface the default route takes);
        # without an eth0 only its empty name is inline.
        inline = next((i for i in listed if i["name"] == DEFAULT_INTERFACE), {"name": ""})
        return {"time": now, **inline, "interfaces": listed}
