"""Prometheus text expositions of a stats snapshot: /metrics/resource (the kubelet 1.20 resource
metrics collector, what metrics-server scrapes) and /metrics/cadvisor (cAdvisor's series).

Names, help texts, label names and sample timestamps are the kubelet's and cAdvisor's: resource
metrics are ALPHA in 1.20, so component-base prefixes their help with "[ALPHA]"; cAdvisor's are
registered raw, without it. Families come out sorted by name and samples by label values, as
the Go registry writes them. Families with no samples are left out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from services.node_api.hostfs import InterfaceCounters
from services.node_api.snapshot import Snapshot
from shared.host.cgroup_io import DeviceIO
from shared.host.cgroup_spec import CgroupFigures
from shared.host.diskstats import DiskStats
from shared.host.facts import os_version
from shared.model.cgroup_names import container_cgroup

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NS_PER_S = 1e9


class _Families:
    """A one-shot collector: families are filled, then rendered once."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[CounterMetricFamily | GaugeMetricFamily, list[str]]] = {}

    def family(self, kind: str, name: str, help_: str, labels: list[str]) -> None:
        family: CounterMetricFamily | GaugeMetricFamily = (
            CounterMetricFamily(name, help_, labels=sorted(labels)) if kind == "counter"
            else GaugeMetricFamily(name, help_, labels=sorted(labels)))
        self._families[name] = (family, sorted(labels))

    def add(self, name: str, labels: dict[str, str], value: float, timestamp: float | None = None) -> None:
        fam, names = self._families[name]
        fam.add_metric([labels.get(n, "") for n in names], value, timestamp=timestamp)

    def collect(self) -> Iterator[Metric]:
        for name in sorted(self._families):
            fam, names = self._families[name]
            if fam.samples:
                fam.samples.sort(key=lambda s: tuple(s.labels.get(n, "") for n in names))
                yield fam

    def render(self) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry)


# -- /metrics/resource ---------------------------------------------------------------------------

_CONTAINER = ["container", "pod", "namespace"]
_POD = ["pod", "namespace"]


def render_resource(summary: dict[str, Any] | None) -> bytes:
    """summary: the snapshot's summary (float times); None when gathering failed."""
    f = _Families()
    f.family("counter", "node_cpu_usage_seconds_total",
             "[ALPHA] Cumulative cpu time consumed by the node in core-seconds", [])
    f.family("gauge", "node_memory_working_set_bytes", "[ALPHA] Current working set of the node in bytes", [])
    f.family("counter", "container_cpu_usage_seconds_total",
             "[ALPHA] Cumulative cpu time consumed by the container in core-seconds", _CONTAINER)
    f.family("gauge", "container_memory_working_set_bytes",
             "[ALPHA] Current working set of the container in bytes", _CONTAINER)
    f.family("counter", "pod_cpu_usage_seconds_total",
             "[ALPHA] Cumulative cpu time consumed by the pod in core-seconds", _POD)
    f.family("gauge", "pod_memory_working_set_bytes", "[ALPHA] Current working set of the pod in bytes", _POD)
    f.family("gauge", "scrape_error",
             "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise", [])
    f.add("scrape_error", {}, 1 if summary is None else 0)
    if summary is None:
        return f.render()

    def cpu(name: str, labels: dict[str, str], stats: dict[str, Any]) -> None:
        c = stats.get("cpu")
        if c and c.get("usageCoreNanoSeconds") is not None:
            f.add(name, labels, c["usageCoreNanoSeconds"] / NS_PER_S, c["time"])

    def memory(name: str, labels: dict[str, str], stats: dict[str, Any]) -> None:
        m = stats.get("memory")
        if m and m.get("workingSetBytes") is not None:
            f.add(name, labels, m["workingSetBytes"], m["time"])

    node = summary["node"]
    cpu("node_cpu_usage_seconds_total", {}, node)
    memory("node_memory_working_set_bytes", {}, node)
    for pod in summary["pods"]:
        ref = {"pod": pod["podRef"]["name"], "namespace": pod["podRef"]["namespace"]}
        for c in pod["containers"]:
            cpu("container_cpu_usage_seconds_total", ref | {"container": c["name"]}, c)
            memory("container_memory_working_set_bytes", ref | {"container": c["name"]}, c)
        cpu("pod_cpu_usage_seconds_total", ref, pod)
        memory("pod_memory_working_set_bytes", ref, pod)
    return f.render()


# -- /metrics/cadvisor ---------------------------------------------------------------------------

_BASE = ["container", "id", "image", "name", "namespace", "pod"]
# cAdvisor's spec series (no timestamp) and CPU-time and page-cache series of every cgroup it
# reports, with the CgroupSpec / CgroupCounters field each is read from (shared/host/cgroup_spec.py).
SPEC_FAMILIES = (
    ("container_spec_cpu_shares", "CPU share of the container.", "cpu_shares"),
    ("container_spec_cpu_period", "CPU period of the container.", "cpu_period"),
    ("container_spec_cpu_quota", "CPU quota of the container.", "cpu_quota"),
    ("container_spec_memory_limit_bytes", "Memory limit for the container.", "memory_limit"),
    ("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.",
     "memory_reservation"),
    ("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", "memory_swap_limit"),
)
COUNTER_FAMILIES = (
    ("counter", "container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", "user_seconds"),
    ("counter", "container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.",
     "system_seconds"),
    ("counter", "container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", "cfs_periods"),
    ("counter", "container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.",
     "cfs_throttled_periods"),
    ("counter", "container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.",
     "cfs_throttled_seconds"),
    ("counter", "container_cpu_cfs_burst_periods_total", "Number of periods when burst occurs.", "cfs_burst_periods"),
    ("counter", "container_cpu_cfs_burst_seconds_total", "Total time duration the container has been bursted.",
     "cfs_burst_seconds"),
    ("gauge", "container_memory_cache", "Number of bytes of page cache memory.", "memory_cache"),
    ("gauge", "container_memory_mapped_file", "Size of memory mapped files in bytes.", "memory_mapped_file"),
    # A counter in cAdvisor, but named without _total, which prometheus_client adds to every
    # counter: a gauge here keeps the name a query uses.
    ("gauge", "container_memory_failcnt", "Number of memory usage hits limits", "memory_failcnt"),
    ("gauge", "container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", "memory_max_usage"),
    ("gauge", "container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", "memory_kernel_usage"),
    ("gauge", "container_memory_total_active_file_bytes", "Current total active file in bytes.",
     "memory_active_file"),
    ("gauge", "container_memory_total_inactive_file_bytes", "Current total inactive file in bytes.",
     "memory_inactive_file"),
    ("counter", "container_memory_events_high_total",
     "Cumulative count of memory.high throttle events for the container", "memory_events_high"),
    ("counter", "container_memory_events_max_total",
     "Cumulative count of memory.max limit hit events for the container", "memory_events_max"),
    ("gauge", "container_memory_file_dirty_bytes",
     "Number of bytes of file cache that has been modified but not yet written back to disk.", "file_dirty"),
    ("gauge", "container_memory_file_writeback_bytes",
     "Number of bytes of file cache that is currently being written back to disk.", "file_writeback"),
    ("counter", "container_memory_pgscan_total",
     "Cumulative number of pages scanned by the page reclaim algorithm.", "pgscan"),
    ("counter", "container_memory_pgsteal_total",
     "Cumulative number of pages reclaimed by the page reclaim algorithm.", "pgsteal"),
    ("counter", "container_memory_workingset_refault_file_total",
     "Cumulative number of refaults of previously evicted file pages.", "workingset_refault_file"),
    ("counter", "container_memory_workingset_refault_anon_total",
     "Cumulative number of refaults of previously evicted anonymous pages.", "workingset_refault_anon"),
)
FAILURES = "container_memory_failures_total"
# Block I/O per device: (family, HELP, bytes or operations, operation).
IO_FAMILIES = (
    ("container_fs_reads_bytes_total", "Cumulative count of bytes read", "bytes", "Read"),
    ("container_fs_writes_bytes_total", "Cumulative count of bytes written", "bytes", "Write"),
    ("container_fs_reads_total", "Cumulative count of reads completed", "ops", "Read"),
    ("container_fs_writes_total", "Cumulative count of writes completed", "ops", "Write"),
)
BLKIO = "container_blkio_device_usage_total"
# cgroup v2 io.stat's cost.* (shared/host/cgroup_io.py), in seconds: (family, HELP, cost key).
COST_FAMILIES = (
    ("container_fs_io_cost_usage_seconds_total", "Cumulative IOCost usage in seconds", "usage"),
    ("container_fs_io_cost_wait_seconds_total", "Cumulative IOCost wait in seconds", "wait"),
    ("container_fs_io_cost_indebt_seconds_total", "Cumulative IOCost debt in seconds", "indebt"),
    ("container_fs_io_cost_indelay_seconds_total", "Cumulative IOCost delay in seconds", "indelay"),
)
US_PER_S = 1_000_000
# The root's filesystems' devices, from /proc/diskstats (shared/host/diskstats.py): (family, HELP,
# kind, DiskStats field). The reads and writes families are IO_FAMILIES' too.
DISK_FAMILIES = (
    ("container_fs_reads_total", "", "counter", "reads"),
    ("container_fs_reads_merged_total", "Cumulative count of reads merged", "counter", "reads_merged"),
    ("container_fs_sector_reads_total", "Cumulative count of sector reads completed", "counter", "sectors_read"),
    ("container_fs_read_seconds_total", "Cumulative count of seconds spent reading", "counter", "read_seconds"),
    ("container_fs_writes_total", "", "counter", "writes"),
    ("container_fs_writes_merged_total", "Cumulative count of writes merged", "counter", "writes_merged"),
    ("container_fs_sector_writes_total", "Cumulative count of sector writes completed", "counter",
     "sectors_written"),
    ("container_fs_write_seconds_total", "Cumulative count of seconds spent writing", "counter", "write_seconds"),
    ("container_fs_io_current", "Number of I/Os currently in progress", "gauge", "io_in_progress"),
    ("container_fs_io_time_seconds_total", "Cumulative count of seconds spent doing I/Os", "counter", "io_seconds"),
    ("container_fs_io_time_weighted_seconds_total", "Cumulative weighted I/O time in seconds", "counter",
     "weighted_io_seconds"),
)
# Packets per interface of the root and of each pod sandbox: (family, HELP, InterfaceCounters field).
PACKET_FAMILIES = (
    ("container_network_receive_packets_total", "Cumulative count of packets received", "rx_packets"),
    ("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving",
     "rx_dropped"),
    ("container_network_transmit_packets_total", "Cumulative count of packets transmitted", "tx_packets"),
    ("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting",
     "tx_dropped"),
)


# (failure_type, scope) -> the CgroupCounters field
FAILURE_SERIES = ((("pgfault", "container"), "pgfault"), (("pgmajfault", "container"), "pgmajfault"),
                  (("pgfault", "hierarchy"), "hierarchy_pgfault"), (("pgmajfault", "hierarchy"), "hierarchy_pgmajfault"))
PROCESS_FAMILIES = (
    ("container_processes", "Number of processes running inside the container.", "processes"),
    ("container_threads", "Number of threads running inside the container", "threads"),
    ("container_threads_max",
     "Maximum number of threads allowed inside the container, infinity if value is zero", "threads_max"),
    ("container_file_descriptors", "Number of open file descriptors for the container.", "file_descriptors"),
    ("container_sockets", "Number of open sockets for the container.", "sockets"),
)
_MACHINE = ["boot_id", "machine_id", "system_uuid"]
VERSION_INFO = "cadvisor_version_info"
_VERSION = ["kernelVersion", "osVersion", "dockerVersion", "cadvisorVersion", "cadvisorRevision"]


OOM_EVENTS = "container_oom_events_total"
ULIMITS = "container_ulimits_soft"


@dataclass
class HostFigures:
    """What /metrics/cadvisor reads from the host beside the stats snapshot."""
    cgroups: Mapping[str, CgroupFigures] = field(default_factory=dict)  # by cgroup name
    devices: Mapping[tuple[int, int], str] = field(default_factory=dict)  # block device names by major:minor
    interfaces: Mapping[str, list[InterfaceCounters]] = field(default_factory=dict)  # the root's, each sandbox's
    # OOM kills by the cgroup whose memory ran out (services/eviction/oom_kills.py); 0 for others.
    oom_events: Mapping[str, int] = field(default_factory=dict)
    diskstats: Mapping[str, DiskStats] = field(default_factory=dict)  # by device path


def _cadvisor_families() -> _Families:
    f = _Families()
    for kind, name, help_, extra in (
        ("counter", "container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", ["cpu"]),
        ("gauge", "container_memory_usage_bytes",
         "Current memory usage in bytes, including all memory regardless of when it was accessed", []),
        ("gauge", "container_memory_working_set_bytes", "Current working set in bytes.", []),
        ("gauge", "container_memory_rss", "Size of RSS in bytes.", []),
        ("gauge", "container_memory_swap", "Container swap usage in bytes.", []),
        ("gauge", "container_fs_usage_bytes",
         "Number of bytes that are consumed by the container on this filesystem.", ["device"]),
        ("gauge", "container_fs_limit_bytes",
         "Number of bytes that can be consumed by the container on this filesystem.", ["device"]),
        ("counter", "container_network_receive_bytes_total", "Cumulative count of bytes received", ["interface"]),
        ("counter", "container_network_receive_errors_total",
         "Cumulative count of errors encountered while receiving", ["interface"]),
        ("counter", "container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", ["interface"]),
        ("counter", "container_network_transmit_errors_total",
         "Cumulative count of errors encountered while transmitting", ["interface"]),
        ("gauge", "container_start_time_seconds", "Start time of the container since unix epoch in seconds.", []),
        ("gauge", "container_creation_time_seconds", "Container creation time since unix epoch in seconds.", []),
        *(("gauge", name, help_, []) for name, help_, _ in SPEC_FAMILIES),
        *((kind, name, help_, []) for kind, name, help_, _ in COUNTER_FAMILIES),
        *(("gauge", name, help_, []) for name, help_, _ in PROCESS_FAMILIES),
        ("counter", FAILURES, "Cumulative count of memory allocation failures.", ["failure_type", "scope"]),
        *(("counter", name, help_, ["device"]) for name, help_, _, _ in IO_FAMILIES),
        *((kind, name, help_, ["device"]) for name, help_, kind, _ in DISK_FAMILIES if help_),
        ("counter", BLKIO, "Blkio Device bytes usage", ["device", "major", "minor", "operation"]),
        *(("counter", name, help_, ["device"]) for name, help_, _ in COST_FAMILIES),
        *(("counter", name, help_, ["interface"]) for name, help_, _ in PACKET_FAMILIES),
        ("gauge", "container_fs_inodes_free", "Number of available Inodes", ["device"]),
        ("gauge", "container_fs_inodes_total", "Number of Inodes", ["device"]),
        ("gauge", "container_last_seen", "Last time a container was seen by the exporter", []),
        ("gauge", "container_health_state", "The result of the container's health check", []),
        *(("counter", f"container_pressure_{resource}_{kind}_seconds_total", help_.format(word), [])
          for resource, word in (("cpu", "CPU"), ("memory", "memory"), ("io", "IO"))
          for kind, help_ in (("stalled", "Total time duration no tasks in the container could make progress due "
                                          "to {} congestion."),
                              ("waiting", "Total time duration tasks in the container have waited due to {} "
                                          "congestion."))),
    ):
        f.family(kind, name, help_, _BASE + extra)
    f.family("counter", OOM_EVENTS, "Count of out of memory events observed for the container", _BASE)
    f.family("gauge", ULIMITS, "Soft ulimit values for the container root process. Unlimited if -1, except priority "
                               "and nice", _BASE + ["ulimit"])
    f.family("gauge", "container_scrape_error",
             "1 if there was an error while getting container metrics, 0 otherwise", [])
    for name, help_ in (("machine_cpu_cores", "Number of logical CPU cores."),
                        ("machine_cpu_physical_cores", "Number of physical CPU cores."),
                        ("machine_cpu_sockets", "Number of CPU sockets."),
                        ("machine_cpu_books", "Number of CPU books."),
                        ("machine_cpu_drawers", "Number of CPU drawers."),
                        ("machine_memory_bytes", "Amount of memory installed on the machine."),
                        ("machine_swap_bytes", "Amount of swap memory available on the machine."),
                        ("machine_nvm_avg_power_budget_watts", "NVM power budget.")):
        f.family("gauge", name, help_, _MACHINE)
    f.family("gauge", "machine_nvm_capacity", "NVM capacity value labeled by NVM mode (memory mode or app direct "
                                              "mode).", _MACHINE + ["mode"])
    f.family("gauge", "machine_scrape_error",
             "1 if there was an error while getting machine metrics, 0 otherwise.", [])
    f.family("gauge", VERSION_INFO, "A metric with a constant '1' value labeled by kernel version, OS version, "
                                    "docker version, cadvisor version & cadvisor revision.", _VERSION)
    return f


def version_labels() -> dict[str, str]:
    """cadvisor_version_info's labels as the kubelet's cAdvisor gives them: the kernel release and
    the OS's PRETTY_NAME; no Docker, and cAdvisor's own version and revision, which the kubelet's
    build leaves empty, empty."""
    return {"kernelVersion": os.uname().release, "osVersion": os_version(), "dockerVersion": "",
            "cadvisorVersion": "", "cadvisorRevision": ""}


def sandbox_cgroups(snap: Snapshot) -> list[str]:
    return [container_cgroup(ids.cgroup, ids.sandbox_id) for ids in snap.pods.values()]


def cadvisor_cgroups(snap: Snapshot) -> list[str]:
    """The cgroups /metrics/cadvisor reports: the root, the pods' cgroup, every pod's, its
    sandbox container's and its containers'."""
    return ["/", snap.kubepods, *(ids.cgroup for ids in snap.pods.values()), *sandbox_cgroups(snap),
            *(c.cgroup for c in snap.containers.values())]


def render_cadvisor(snap: Snapshot | None, spec: dict[str, Any] | None, spec_time: float,
                    host: HostFigures | None = None) -> bytes:
    """snap None: the containers could not be listed (container_scrape_error 1); spec None:
    the machine facts could not be read (machine_scrape_error 1). host: what the host's cgroups
    (cadvisor_cgroups) and network namespaces said beside the snapshot."""
    f = _cadvisor_families()
    f.add(VERSION_INFO, version_labels(), 1)
    f.add("machine_scrape_error", {}, 0 if spec else 1)
    if spec:
        machine = {"boot_id": spec["boot_id"], "machine_id": spec["machine_id"], "system_uuid": spec["system_uuid"]}
        for name, key in (("machine_cpu_cores", "num_cores"), ("machine_cpu_physical_cores", "num_physical_cores"),
                          ("machine_cpu_sockets", "num_sockets"), ("machine_cpu_books", "num_books"),
                          ("machine_cpu_drawers", "num_drawers"), ("machine_memory_bytes", "memory_capacity"),
                          ("machine_swap_bytes", "swap_capacity")):
            f.add(name, machine, spec.get(key, 0), spec_time or None)
        # The kubelet's cAdvisor reads NVM (Intel Optane) only in a build with ipmctl, which its
        # release is not: zeros, as pykubelet's MachineInfo has them.
        nvm = spec.get("nvm", {})
        f.add("machine_nvm_capacity", {**machine, "mode": "memory_mode"}, nvm.get("memory_mode_capacity", 0),
              spec_time or None)
        f.add("machine_nvm_capacity", {**machine, "mode": "app_direct_mode"}, nvm.get("app direct_mode_capacity", 0),
              spec_time or None)
        f.add("machine_nvm_avg_power_budget_watts", machine, nvm.get("avg_power_budget", 0), spec_time or None)
    f.add("container_scrape_error", {}, 0 if snap else 1)
    if snap is not None:
        out = _CadvisorSeries(f, time.time(), host or HostFigures(), snap.time)
        out.node(snap)
        out.pods(snap)
    return f.render()


class _CadvisorSeries:
    """cAdvisor's series of the node's cgroups, as the kubelet's /metrics/cadvisor has them."""

    def __init__(self, f: _Families, now: float, host: HostFigures, taken: float) -> None:
        self.f, self.now, self.host, self.taken = f, now, host, taken

    def node(self, snap: Snapshot) -> None:
        node = snap.summary["node"]
        root = {"id": "/"}
        self.series(root, node)
        for device, stats in snap.node_fs:
            self.fs(root, device, stats)
            self.inodes(root, device, stats)
            if (disk := self.host.diskstats.get(device)) is not None:
                for name, _, _, attr in DISK_FAMILIES:
                    self.f.add(name, root | {"device": device}, getattr(disk, attr), self.taken)
        if node.get("network"):
            self.network(root, node["network"])
        self.packets(root)
        for sc in node.get("systemContainers", []):
            if sc["name"] == "pods":
                self.series({"id": snap.kubepods}, sc)

    def pods(self, snap: Snapshot) -> None:
        for pod in snap.summary["pods"]:
            uid = pod["podRef"]["uid"]
            ref = {"pod": pod["podRef"]["name"], "namespace": pod["podRef"]["namespace"]}
            ids = snap.pods.get(uid)
            if ids is None:
                continue
            self.series(ref | {"id": ids.cgroup}, pod)
            if pod.get("network"):
                # cAdvisor finds a pod's network in its sandbox (pause) container's cgroup
                sandbox = ref | {"id": container_cgroup(ids.cgroup, ids.sandbox_id), "name": ids.sandbox_id}
                self.network(sandbox, pod["network"])
                self.started(sandbox, pod)
                self.limits(sandbox)
                self.packets(sandbox)
            for c in pod["containers"]:
                cids = snap.containers.get((uid, c["name"]))
                if cids is None:
                    continue
                labels = ref | {"container": c["name"], "id": cids.cgroup, "image": cids.image, "name": cids.id}
                self.series(labels, c)
                if c.get("rootfs"):
                    self.fs(labels, snap.image_device, c["rootfs"])

    def series(self, labels: dict[str, str], stats: dict[str, Any]) -> None:
        """cpu, memory, start time and last seen of one cgroup."""
        c = stats.get("cpu") or {}
        if c.get("usageCoreNanoSeconds"):
            self.f.add("container_cpu_usage_seconds_total", labels | {"cpu": "total"},
                       c["usageCoreNanoSeconds"] / NS_PER_S, c["time"])
        m = stats.get("memory") or {}
        for name, key in (("container_memory_usage_bytes", "usageBytes"),
                          ("container_memory_working_set_bytes", "workingSetBytes"),
                          ("container_memory_rss", "rssBytes")):
            if m.get(key) is not None:
                self.f.add(name, labels, m[key], m["time"])
        swap = stats.get("swap") or {}
        if swap.get("swapUsageBytes") is not None:
            self.f.add("container_memory_swap", labels, swap["swapUsageBytes"], swap["time"])
        self.pressure(labels, stats)
        self.started(labels, stats)
        self.limits(labels)

    def limits(self, labels: dict[str, str]) -> None:
        """The cgroup's spec series, its CPU-time and memory counters and its processes."""
        # every cgroup, 0 for none, as cAdvisor's
        self.f.add(OOM_EVENTS, labels, self.host.oom_events.get(labels["id"], 0), self.taken)
        found = self.host.cgroups.get(labels["id"])
        if found is None:
            return
        for name, _, attr in SPEC_FAMILIES:
            value = getattr(found.spec, attr)
            if attr != "cpu_quota" or value:  # cAdvisor: a quota series only for a quota
                self.f.add(name, labels, value)
        for _, name, _, attr in COUNTER_FAMILIES:
            if (value := getattr(found.counters, attr)) is not None:
                self.f.add(name, labels, value, self.taken)
        for (failure, scope), attr in FAILURE_SERIES:
            if (value := getattr(found.counters, attr)) is not None:
                self.f.add(FAILURES, labels | {"failure_type": failure, "scope": scope}, value, self.taken)
        if found.processes is not None:
            for name, _, attr in PROCESS_FAMILIES:
                self.f.add(name, labels, getattr(found.processes, attr), self.taken)
            # A container's (cAdvisor knows its root process; for a pod's or the node's cgroup not).
            if labels.get("name") and found.processes.open_files_soft is not None:
                self.f.add(ULIMITS, labels | {"ulimit": "max_open_files"}, found.processes.open_files_soft,
                           self.taken)
        for io in found.io or []:
            self.block_io(labels, io)

    def block_io(self, labels: dict[str, str], io: DeviceIO) -> None:
        """One device's figures of the cgroup: reads and writes, and its iocost time where the
        iocost controller weighs the device."""
        device = self.host.devices.get((io.major, io.minor), "")
        for name, _, kind, op in IO_FAMILIES:
            counts = io.service_bytes if kind == "bytes" else io.serviced
            self.f.add(name, labels | {"device": device}, counts.get(op, 0), self.taken)
        for op, value in io.service_bytes.items():
            self.f.add(BLKIO, labels | {"device": device, "major": str(io.major), "minor": str(io.minor),
                                        "operation": op}, value, self.taken)
        for name, _, key in COST_FAMILIES:
            if key in io.cost:
                self.f.add(name, labels | {"device": device}, io.cost[key] / US_PER_S, self.taken)

    def pressure(self, labels: dict[str, str], stats: dict[str, Any]) -> None:
        """cAdvisor's pressure counters (cgroup v2): the time all tasks stalled ("full") and some
        waited, from the kernel's microseconds."""
        for resource in ("cpu", "memory", "io"):
            at = stats.get(resource) or {}
            psi = at.get("psi")
            if psi:
                for kind, line in (("stalled", "full"), ("waiting", "some")):
                    self.f.add(f"container_pressure_{resource}_{kind}_seconds_total", labels,
                               psi[line]["total"] / 1e6, at["time"])

    def started(self, labels: dict[str, str], stats: dict[str, Any]) -> None:
        if stats.get("startTime"):
            self.f.add("container_start_time_seconds", labels, int(stats["startTime"]))
            # cAdvisor's start time is the creation time unless a start time is known apart,
            # which it never is for CRI containers and cgroups: the two series are one value.
            self.f.add("container_creation_time_seconds", labels, int(stats["startTime"]))
        self.f.add("container_last_seen", labels, int(self.now), self.now)
        # cAdvisor's Docker health checks; a CRI container has none, which cAdvisor says as -1.
        self.f.add("container_health_state", labels, -1, self.taken)

    def fs(self, labels: dict[str, str], device: str, stats: dict[str, Any]) -> None:
        if stats.get("usedBytes") is not None:
            self.f.add("container_fs_usage_bytes", labels | {"device": device}, stats["usedBytes"], stats["time"])
        if stats.get("capacityBytes") is not None:
            self.f.add("container_fs_limit_bytes", labels | {"device": device}, stats["capacityBytes"], stats["time"])

    def inodes(self, labels: dict[str, str], device: str, stats: dict[str, Any]) -> None:
        """The node's filesystems' inodes (cAdvisor has them for the root's filesystems only)."""
        for name, key in (("container_fs_inodes_free", "inodesFree"), ("container_fs_inodes_total", "inodes")):
            if stats.get(key) is not None:
                self.f.add(name, labels | {"device": device}, stats[key], stats["time"])

    def packets(self, labels: dict[str, str]) -> None:
        for i in self.host.interfaces.get(labels["id"], []):
            for name, _, key in PACKET_FAMILIES:
                self.f.add(name, labels | {"interface": i.name}, getattr(i, key), self.taken)

    def network(self, labels: dict[str, str], net: dict[str, Any]) -> None:
        interfaces = net.get("interfaces") or ([net] if net.get("name") else [])
        for i in interfaces:
            il = labels | {"interface": i["name"]}
            for name, key in (("container_network_receive_bytes_total", "rxBytes"),
                              ("container_network_receive_errors_total", "rxErrors"),
                              ("container_network_transmit_bytes_total", "txBytes"),
                              ("container_network_transmit_errors_total", "txErrors")):
                if i.get(key) is not None:
                    self.f.add(name, il, i[key], net["time"])
