"""One gather of the node's and its pods' usage, handed out as each stats endpoint wants it.

The node's figures come from the root cgroup and /proc (node.py), each pod's from CRI, sampled in
the background where the runtime has pod sandbox stats (sandbox_stats.py), volumes and logs from
the store and a look at the filesystem (pods.py, volumes.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from cri_api.v1 import api_pb2 as cri
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from services.node_api import resource_metrics
from services.node_api.hostfs import block_device_names, cgroup_interfaces, node_interfaces, read_mounts, statfs_nearest
from services.node_api.machine import MachineFacts, MachineSpec
from services.node_api.resource_metrics import HostFigures
from services.node_api.snapshot import Snapshot, summary_json
from services.node_api.stats.cpu_rates import CpuRates
from services.node_api.stats.node import ImageFsSource, NodeStats
from services.node_api.stats.pods import PodStats, pod_uid, read_views, running_by_sandbox, stats_by_container
from services.node_api.stats.sandbox_stats import SandboxStatsCache
from services.node_api.stats.summary_fields import Pass
from services.node_api.stats.volumes import PodView, VolumeStats
from shared.config.settings import NodeSettings
from shared.host.cgroup_spec import read_figures
from shared.host.cgroups import CgroupReader
from shared.host.diskstats import read_diskstats
from shared.runtime.cri import labels as L
from shared.runtime.cri.client import CRIError
from shared.store import OomKill, Store

log = logging.getLogger(__name__)

MANAGED = {L.MANAGED_BY: "true"}


class StatsRuntime(Protocol):
    async def list_pod_sandbox(self, labels: dict[str, str] | None = None) -> list[cri.PodSandbox]: ...
    async def list_containers(self, labels: dict[str, str] | None = None,
                              sandbox_id: str | None = None) -> list[cri.Container]: ...
    async def list_container_stats(self, sandbox_id: str | None = None) -> list[cri.ContainerStats]: ...
    async def list_pod_sandbox_stats(self) -> list[cri.PodSandboxStats]: ...


class StatsError(RuntimeError):
    """The stats could not be gathered (the runtime did not answer); the message says why."""


class StatsProvider:
    """Gathers the node's and its pods' resource usage for the kubelet API's stats endpoints."""

    def __init__(self, runtime: StatsRuntime, images: ImageFsSource, store: Store, settings: NodeSettings, *,
                 cgroups: CgroupReader | None = None, proc: str | Path = "/proc",
                 machine: MachineSpec | None = None, clock: Callable[[], float] = time.monotonic,
                 sys_block: str | Path = "/sys/block") -> None:
        self.runtime = runtime
        self.images = images
        self.store = store
        self.settings = settings
        cgroups = cgroups or CgroupReader(kubepods=settings.kubelet.kubepods)
        self.cgroups = cgroups
        proc = Path(proc)
        self.proc, self.sys_block = proc, Path(sys_block)
        self.machine = machine or MachineSpec(MachineFacts(proc=proc))
        self.rates = CpuRates(clock)
        self.sandbox_stats = SandboxStatsCache(runtime, clock=clock)
        self.node = NodeStats(settings, cgroups, proc, self.rates, clock)
        # A first CPU sample of the node and the pods' cgroup now, so the first request already
        # has their usageNanoCores (the kubelet's cAdvisor samples from its start on).
        self.node.prime()
        self.volumes = VolumeStats(settings, clock)
        self.pods = PodStats(settings, cgroups, self.rates, self.volumes)

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
            return resource_metrics.render_cadvisor(None, spec, self.machine.timestamp)
        # In a thread: a dozen small files a cgroup, two cgroups a pod and one a container.
        host = await asyncio.to_thread(self._host_figures, snap)
        return resource_metrics.render_cadvisor(snap, spec, self.machine.timestamp, host)

    def _host_figures(self, snap: Snapshot) -> HostFigures:
        """The snapshot's cgroups' figures, the names of the block devices their I/O is on, and
        the interfaces of the node and of each pod sandbox."""
        cgroups = {name: found for name in resource_metrics.cadvisor_cgroups(snap)
                   if (found := read_figures(self.cgroups, name)) is not None}
        interfaces = {"/": node_interfaces(self.proc / "net/dev")}
        for name in resource_metrics.sandbox_cgroups(snap):
            try:
                procs = self.cgroups.path("cpu", name) / "cgroup.procs"
            except ValueError:
                continue
            interfaces[name] = cgroup_interfaces(self.proc, procs)
        return HostFigures(
            cgroups=cgroups, devices=block_device_names(self.sys_block, read_mounts(self.proc / "self/mountinfo")),
            interfaces=interfaces, oom_events=self._oom_events(), diskstats=read_diskstats(self.proc / "diskstats"))

    def _oom_events(self) -> dict[str, int]:
        """The OOM kills the eviction service counted, by cgroup (services/eviction/oom_kills.py)."""
        with self.store.session() as s:
            return {row.cgroup: row.count for row in s.scalars(select(OomKill))}

    def machine_spec(self) -> dict[str, Any]:
        """GET /spec: cAdvisor's MachineInfo."""
        return self.machine.get()

    async def snapshot(self, full: bool = True) -> Snapshot:
        """One gather. full=False is the CPU-and-memory subset /metrics/resource needs (no
        filesystems, volumes, logs or network), as the kubelet's GetCPUAndMemoryStats."""
        now = time.time()
        try:
            sandboxes, containers, cstats, sandbox_stats, image_fs = await asyncio.gather(
                self.runtime.list_pod_sandbox(MANAGED), self.runtime.list_containers(MANAGED),
                self.runtime.list_container_stats(), self.sandbox_stats.get(),
                self.node.image_fs(self.images, now) if full else _no_image_fs())
        except CRIError as exc:
            raise StatsError(f"failed to list pod stats: {exc}") from exc
        g = Pass(now, full, Snapshot(time=now, summary={}, kubepods=self.cgroups.kubepods()))
        node = self.node.node(g, *image_fs)
        ready = [s for s in sandboxes if s.state == cri.SANDBOX_READY]
        views = self._store_views({pod_uid(s) for s in ready}) if full else {}
        if full:
            g.logs_fs = statfs_nearest(self.settings.kubelet.pod_logs_dir)
            g.mount_fs = await self.volumes.statfs_mounts(list(views.values()))
        running, stats = running_by_sandbox(containers), stats_by_container(cstats)
        pods = [self.pods.pod(g, s, running.get(s.id, []), stats, sandbox_stats, views.get(pod_uid(s), PodView()))
                for s in ready]
        pods.sort(key=lambda p: (p["podRef"]["namespace"], p["podRef"]["name"]))
        g.snap.summary = {"node": node, "pods": pods}
        self.rates.expire()
        return g.snap

    def _store_views(self, uids: set[str]) -> dict[str, PodView]:
        try:
            return read_views(self.store, uids)
        except SQLAlchemyError as exc:  # the pods' CPU and memory are still worth reporting
            log.warning("stats without volumes and logs: the store cannot be read: %s", exc)
            return {}


async def _no_image_fs() -> tuple[None, str, None]:
    return None, "", None
