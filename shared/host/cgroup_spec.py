"""A cgroup's limits and its CPU-time and page-cache counters, as cAdvisor reads them for the
kubelet's /metrics/cadvisor (container_spec_*, container_cpu_user/system/cfs_*,
container_memory_cache/mapped_file/failcnt/max_usage_bytes).

cAdvisor's rules, kept here so the figures match the kubelet's:
- A memory limit above 2^62 (v1's "unlimited", v2's "max") is reported as 0, as is one whose file
  is missing (no swap accounting, no memory.min).
- v1's swap limit is memory.memsw.limit_in_bytes as it is (memory and swap together); v2's is
  memory.swap.max (swap only). The reservation is v1's soft limit, v2's memory.min.
- v2's cpu.weight is turned back into shares with cAdvisor's linear formula; a quota of -1 or
  "max" is 0, and the CFS counters are reported only for a cgroup with a quota.
- The root's memory limit and swap limit are the node's MemTotal and SwapTotal.
- v2 has no failcnt (always 0) and no max_usage before memory.peak (kernel 5.19): 0 then, and
  always for the root, which has no memory.stat either (no cache or mapped-file figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.host.cgroup_io import DeviceIO, read_io
from shared.host.cgroup_processes import CgroupProcesses, read_processes
from shared.host.cgroups import UNLIMITED, USER_HZ, CgroupReader, read_int, read_keyed, read_meminfo

NS_PER_USEC = 1000


@dataclass(frozen=True)
class CgroupSpec:
    """container_spec_*: what the cgroup is allowed. quota 0: no CPU quota."""
    cpu_shares: int = 0
    cpu_period: int = 0
    cpu_quota: int = 0
    memory_limit: int = 0
    memory_reservation: int = 0
    memory_swap_limit: int = 0


@dataclass(frozen=True)
class CgroupCounters:
    """CPU time split and throttling (seconds, counts) and page-cache figures (bytes); None
    where the kernel gives no figure for this cgroup."""
    user_seconds: float | None = None
    system_seconds: float | None = None
    cfs_periods: int | None = None
    cfs_throttled_periods: int | None = None
    cfs_throttled_seconds: float | None = None
    cfs_burst_periods: int | None = None  # cpu.cfs_burst_us at work (kernel 5.14 and newer)
    cfs_burst_seconds: float | None = None
    memory_cache: int | None = None
    memory_mapped_file: int | None = None
    memory_failcnt: int | None = None
    memory_max_usage: int | None = None
    memory_kernel_usage: int | None = None
    memory_active_file: int | None = None
    memory_inactive_file: int | None = None
    # container_memory_failures_total: the cgroup's own page faults and its subtree's.
    pgfault: int | None = None
    pgmajfault: int | None = None
    hierarchy_pgfault: int | None = None
    hierarchy_pgmajfault: int | None = None
    # v2 only (cAdvisor reports 0 on v1).
    memory_events_high: int | None = None
    memory_events_max: int | None = None
    file_dirty: int | None = None
    file_writeback: int | None = None
    pgscan: int | None = None
    pgsteal: int | None = None
    workingset_refault_file: int | None = None
    workingset_refault_anon: int | None = None


# Figures cAdvisor takes from v2's memory.stat and memory.events only; 0 on v1.
V2_ONLY = ("memory_events_high", "memory_events_max", "file_dirty", "file_writeback", "pgscan", "pgsteal",
           "workingset_refault_file", "workingset_refault_anon")


def _limit(value: int | None) -> int:
    return value if value is not None and value < UNLIMITED else 0


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def weight_to_shares(weight: int) -> int:
    """cAdvisor's inverse of the old linear shares-to-weight mapping (integer division)."""
    return 2 + ((weight - 1) * 262142) // 9999


def _root_memory(proc: Path) -> tuple[int, int]:
    info = read_meminfo(proc / "meminfo")
    return info.get("MemTotal", 0), info.get("SwapTotal", 0)


def spec_v1(cpu: Path, memory: Path, root: bool, proc: Path) -> CgroupSpec:
    quota = read_int(cpu / "cpu.cfs_quota_us")
    if root:
        mem_limit, swap_limit = _root_memory(proc)
    else:
        mem_limit = _limit(read_int(memory / "memory.limit_in_bytes"))
        swap_limit = _limit(read_int(memory / "memory.memsw.limit_in_bytes"))
    return CgroupSpec(cpu_shares=read_int(cpu / "cpu.shares") or 0, cpu_period=read_int(cpu / "cpu.cfs_period_us") or 0,
                      cpu_quota=quota if quota is not None and quota > 0 else 0,
                      memory_limit=mem_limit, memory_reservation=_limit(read_int(memory / "memory.soft_limit_in_bytes")),
                      memory_swap_limit=swap_limit)


def spec_v2(d: Path, root: bool, proc: Path) -> CgroupSpec:
    weight = read_int(d / "cpu.weight")
    quota, period = 0, 0
    if (cpu_max := _read_text(d / "cpu.max")) is not None:
        fields = cpu_max.split()
        if len(fields) == 2:
            quota = int(fields[0]) if fields[0].isdigit() else 0
            period = int(fields[1]) if fields[1].isdigit() else 0
    if root:
        mem_limit, swap_limit = _root_memory(proc)
    else:
        # "max" does not read as a number: 0, as an unlimited one.
        mem_limit, swap_limit = _limit(read_int(d / "memory.max")), _limit(read_int(d / "memory.swap.max"))
    return CgroupSpec(cpu_shares=weight_to_shares(weight) if weight else 0, cpu_period=period, cpu_quota=quota,
                      memory_limit=mem_limit, memory_reservation=_limit(read_int(d / "memory.min")),
                      memory_swap_limit=swap_limit)


def counters_v1(cpu: Path, cpuacct: Path, memory: Path, quota: int) -> CgroupCounters:
    ticks = read_keyed(cpuacct / "cpuacct.stat")
    throttle = read_keyed(cpu / "cpu.stat") if quota else {}
    mem = read_keyed(memory / "memory.stat")
    # Hierarchical figures where the hierarchy is on (it always is on current kernels).
    hierarchical = read_int(memory / "memory.use_hierarchy") == 1
    cache = mem.get("total_cache" if hierarchical else "cache")
    mapped = mem.get("total_mapped_file" if hierarchical else "mapped_file")
    return CgroupCounters(
        user_seconds=ticks["user"] / USER_HZ if "user" in ticks else None,
        system_seconds=ticks["system"] / USER_HZ if "system" in ticks else None,
        cfs_periods=throttle.get("nr_periods"), cfs_throttled_periods=throttle.get("nr_throttled"),
        cfs_throttled_seconds=throttle["throttled_time"] / 1e9 if "throttled_time" in throttle else None,
        cfs_burst_periods=throttle.get("nr_bursts"),
        cfs_burst_seconds=throttle["burst_time"] / 1e9 if "burst_time" in throttle else None,
        memory_cache=cache, memory_mapped_file=mapped, memory_failcnt=read_int(memory / "memory.failcnt"),
        memory_max_usage=read_int(memory / "memory.max_usage_in_bytes"),
        memory_kernel_usage=read_int(memory / "memory.kmem.usage_in_bytes"),
        memory_active_file=mem.get("total_active_file"), memory_inactive_file=mem.get("total_inactive_file"),
        pgfault=mem.get("pgfault"), pgmajfault=mem.get("pgmajfault"),
        hierarchy_pgfault=mem.get("total_pgfault"), hierarchy_pgmajfault=mem.get("total_pgmajfault"),
        **(dict.fromkeys(V2_ONLY, 0) if mem else {}))


def counters_v2(d: Path, quota: int, root: bool) -> CgroupCounters:
    cpu = read_keyed(d / "cpu.stat")
    usec = NS_PER_USEC / 1e9
    throttled = "throttled_usec" in cpu and quota
    mem = {} if root else read_keyed(d / "memory.stat")  # the root has no memory.stat of its own
    return CgroupCounters(
        user_seconds=cpu["user_usec"] * usec if "user_usec" in cpu else None,
        system_seconds=cpu["system_usec"] * usec if "system_usec" in cpu else None,
        cfs_periods=cpu.get("nr_periods") if quota else None,
        cfs_throttled_periods=cpu.get("nr_throttled") if quota else None,
        cfs_throttled_seconds=cpu["throttled_usec"] * usec if throttled else None,
        cfs_burst_periods=cpu.get("nr_bursts") if quota else None,
        cfs_burst_seconds=cpu["burst_usec"] * usec if quota and "burst_usec" in cpu else None,
        memory_cache=mem.get("file"), memory_mapped_file=mem.get("file_mapped"),
        memory_failcnt=0, memory_max_usage=0 if root else (read_int(d / "memory.peak") or 0),
        **({} if root else _v2_memory_extras(d, mem)))


def _v2_memory_extras(d: Path, mem: dict[str, int]) -> dict[str, int | None]:
    events = read_keyed(d / "memory.events")
    return dict(memory_kernel_usage=0, memory_active_file=mem.get("active_file"),
                memory_inactive_file=mem.get("inactive_file"),
                pgfault=mem.get("pgfault"), pgmajfault=mem.get("pgmajfault"),
                hierarchy_pgfault=mem.get("pgfault"), hierarchy_pgmajfault=mem.get("pgmajfault"),
                memory_events_high=events.get("high"), memory_events_max=events.get("max"),
                file_dirty=mem.get("file_dirty"), file_writeback=mem.get("file_writeback"),
                pgscan=mem.get("pgscan"), pgsteal=mem.get("pgsteal"),
                workingset_refault_file=mem.get("workingset_refault_file"),
                workingset_refault_anon=mem.get("workingset_refault_anon"))


@dataclass(frozen=True)
class CgroupFigures:
    spec: CgroupSpec
    counters: CgroupCounters
    processes: CgroupProcesses | None
    io: list[DeviceIO] | None = None


def read_figures(reader: CgroupReader, cgroup: str) -> CgroupFigures | None:
    """The cgroup's spec, counters, processes and block I/O; None for a name that is not a cgroup's or a
    cgroup that is gone (its spec would be all zeros)."""
    try:
        cpu, cpuacct, memory = (reader.path(c, cgroup) for c in ("cpu", "cpuacct", "memory"))
    except ValueError:
        return None
    root = cgroup.strip("/") == ""
    if not (cpu.is_dir() or memory.is_dir()):
        return None
    if reader.version == 2:
        spec = spec_v2(cpu, root, reader.proc)
        counters = counters_v2(cpu, spec.cpu_quota, root)
    else:
        spec = spec_v1(cpu, memory, root, reader.proc)
        counters = counters_v1(cpu, cpuacct, memory, spec.cpu_quota)
    return CgroupFigures(spec, counters, read_processes(reader, cgroup), read_io(reader, cgroup))
