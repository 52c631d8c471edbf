"""The host's CPUs and NUMA nodes, in the order the static CPU manager takes them: package, then
core, then CPU, so a core's hyperthreads and a package's cores stay together."""

from __future__ import annotations

import math
import os
from pathlib import Path

from shared.model.cpusets import CPUSetError, format_cpuset, parse_cpuset

SYS_CPU = Path("/sys/devices/system/cpu")
SYS_NODE = Path("/sys/devices/system/node")


def online_cpus() -> frozenset[int]:
    """The CPUs this node may use: the online ones this process may run on."""
    try:
        online = parse_cpuset((SYS_CPU / "online").read_text().strip())
    except (OSError, CPUSetError):
        online = frozenset(range(os.cpu_count() or 1))
    return online & frozenset(os.sched_getaffinity(0)) or online


def numa_nodes(sys_node: Path = SYS_NODE) -> frozenset[int]:
    """The host's online NUMA nodes ({0} on a host without NUMA support)."""
    try:
        return parse_cpuset((sys_node / "online").read_text().strip()) or frozenset({0})
    except (OSError, CPUSetError):
        return frozenset({0})


def _place(cpu: int, sys_cpu: Path) -> tuple[int, int, int]:
    """(package, core, cpu); a CPU whose topology cannot be read is a core of its own."""
    topo = sys_cpu / f"cpu{cpu}" / "topology"
    try:
        return (int((topo / "physical_package_id").read_text()), int((topo / "core_id").read_text()), cpu)
    except (OSError, ValueError):
        return (0, cpu, cpu)


def topology_order(cpus: frozenset[int], sys_cpu: Path = SYS_CPU) -> list[int]:
    """cpus sorted by (package, core, cpu)."""
    return sorted(cpus, key=lambda cpu: _place(cpu, sys_cpu))


def physical_cores(cpus: frozenset[int], sys_cpu: Path = SYS_CPU) -> list[frozenset[int]]:
    """The physical cores the CPUs are on, each as its CPUs (its hyperthreads), in topology order."""
    by_core: dict[tuple[int, int], set[int]] = {}
    for cpu in topology_order(cpus, sys_cpu):
        package, core, _ = _place(cpu, sys_cpu)
        by_core.setdefault((package, core), set()).add(cpu)
    return [frozenset(c) for c in by_core.values()]


def reserved_cpus(reserved_system_cpus: str, reserved_millicores: int, order: list[int]) -> frozenset[int]:
    """reservedSystemCPUs when set, else the first ceil(reserved cpu) CPUs in topology order."""
    if reserved_system_cpus:
        return parse_cpuset(reserved_system_cpus)
    return frozenset(order[:math.ceil(reserved_millicores / 1000)])


def static_policy_problem(reserved_system_cpus: str, reserved_millicores: int, cpus: frozenset[int]) -> str:
    """Why the static policy cannot run on this node ("" when it can), in the kubelet's words."""
    if reserved_system_cpus:
        wanted = parse_cpuset(reserved_system_cpus)
        if not wanted <= cpus:
            return (f"reservedSystemCPUs {reserved_system_cpus!r}: CPUs {format_cpuset(wanted - cpus)} are not online "
                    f"here (online: {format_cpuset(cpus)})")
        if wanted == cpus:
            return f"reservedSystemCPUs {reserved_system_cpus!r} is every CPU of the node: none is left for pods"
        return ""
    if reserved_millicores <= 0:
        return ("cpuManagerPolicy static requires systemReserved.cpu + kubeReserved.cpu (or reservedSystemCPUs) to be "
                "greater than zero")
    if math.ceil(reserved_millicores / 1000) >= len(cpus):
        return (f"cpuManagerPolicy static: systemReserved.cpu + kubeReserved.cpu ({reserved_millicores}m) leaves none of "
                f"the node's {len(cpus)} CPUs for pods")
    return ""
