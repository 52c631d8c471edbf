"""The node's capacity and allocatable resources, as the kubelet computes them.

allocatable = capacity - kubeReserved - systemReserved - the hard eviction thresholds
(memory.available for memory, nodefs.available for ephemeral-storage), never below zero.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shared.config.thresholds import Threshold, hard_eviction_reservation
from shared.host.facts import cpu_capacity_millicores, memory_capacity_bytes
from shared.model.cpusets import parse_cpuset
from shared.model.quantity import millicores, to_bytes

if TYPE_CHECKING:
    from shared.config.settings import KubeletConfiguration


@dataclass(frozen=True)
class Reservations:
    """kubeReserved + systemReserved summed per resource (cpu in millicores, the rest in bytes or
    a count), and the hard eviction thresholds, from the config."""

    reserved: dict[str, int]
    thresholds: tuple[Threshold, ...] = ()

    @classmethod
    def from_config(cls, kubelet: KubeletConfiguration) -> "Reservations":
        total: dict[str, int] = {}
        for source in (kubelet.kube_reserved, kubelet.system_reserved):
            for name, value in source.items():
                total[name] = total.get(name, 0) + (millicores(value) if name == "cpu" else to_bytes(value))
        if kubelet.reserved_system_cpus:
            # As the kubelet: the reserved CPUs are the node's CPU reservation, whatever
            # systemReserved and kubeReserved say of cpu.
            total["cpu"] = len(parse_cpuset(kubelet.reserved_system_cpus)) * 1000
        return cls(total, tuple(kubelet.eviction_thresholds()))

    def reserved_amount(self, resource: str) -> int:
        return self.reserved.get(resource, 0)


NO_RESERVATIONS = Reservations({})


@dataclass(frozen=True)
class ReservedCgroup:
    """enforceNodeAllocatable's system-reserved or kube-reserved: the existing cgroup whose
    limits are set to the reservation (only the resources it names)."""
    key: str           # system-reserved, kube-reserved
    title: str         # the kubelet's words for it in errors: System Reserved, Kube Reserved
    field: str         # systemReserved, kubeReserved
    cgroup: str        # from the cgroup root, validated: /system.slice
    cpu_millicores: int | None
    memory_bytes: int | None
    pids: int | None

    @property
    def empty(self) -> bool:
        return self.cpu_millicores is None and self.memory_bytes is None and self.pids is None

    @property
    def unit(self) -> str:
        """The slice unit it is with the systemd driver (validated as where systemd keeps it):
        /kube.slice/kube-reserved.slice -> kube-reserved.slice."""
        return self.cgroup.rsplit("/", 1)[-1]

    def v1_controllers(self) -> list[str]:
        """The cgroup v1 hierarchies its limits go to."""
        return [c for c, v in (("cpu", self.cpu_millicores), ("memory", self.memory_bytes), ("pids", self.pids))
                if v is not None]

    def directory(self, cgroup_root: Path, controller: str) -> Path:
        """Where its limits of one controller are: the one cgroup on v2, that hierarchy's on v1."""
        rel = self.cgroup.lstrip("/")
        return cgroup_root / rel if (cgroup_root / "cgroup.controllers").is_file() else cgroup_root / controller / rel


def reserved_cgroups(kubelet: KubeletConfiguration) -> list[ReservedCgroup]:
    out = []
    for key, title, field, cgroup, reserved in (
            ("system-reserved", "System Reserved", "systemReserved", kubelet.system_reserved_cgroup,
             kubelet.system_reserved),
            ("kube-reserved", "Kube Reserved", "kubeReserved", kubelet.kube_reserved_cgroup, kubelet.kube_reserved)):
        if key in kubelet.enforce_node_allocatable:
            out.append(ReservedCgroup(key, title, field, cgroup,
                                      millicores(reserved["cpu"]) if "cpu" in reserved else None,
                                      to_bytes(reserved["memory"]) if "memory" in reserved else None,
                                      int(reserved["pid"]) if "pid" in reserved else None))
    return out


def allocatable(cpu_millicores: int, memory_bytes: int, reservations: Reservations = NO_RESERVATIONS,
                disk_bytes: int = 0) -> dict[str, int]:
    hard = hard_eviction_reservation(list(reservations.thresholds), memory_bytes, disk_bytes)
    return {
        "cpu": max(0, cpu_millicores - reservations.reserved_amount("cpu")),
        "memory": max(0, memory_bytes - reservations.reserved_amount("memory") - hard["memory"]),
        "ephemeral-storage": max(0, disk_bytes - reservations.reserved_amount("ephemeral-storage")
                                 - hard["ephemeral-storage"]),
    }


def pods_cgroup_limits(cpu_millicores: int, memory_bytes: int, reservations: Reservations,
                       pids: int | None = None, enforced: bool = True) -> dict[str, int]:
    """What the kubelet puts on /kubepods: with enforceNodeAllocatable=pods, capacity minus the
    reservations, but not minus the hard eviction thresholds, so the node evicts before the
    kernel kills; without it, the capacity (a cgroup's default cpu shares would starve the pods).
    pids: the node's pid capacity (task_max), None when unknown. Reservations of every pid leave
    no "pid": pids.max stays as it is, as with the kubelet (a limit of 0 is none to it)."""
    capacity = {"cpu": cpu_millicores, "memory": memory_bytes, **({"pid": pids} if pids is not None else {})}
    if not enforced:
        return capacity
    limits = {name: max(0, value - reservations.reserved_amount(name)) for name, value in capacity.items()}
    if limits.get("pid") == 0:
        del limits["pid"]
    return limits


def disk_capacity_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def node_capacity(root_dir: str, max_pods: int, reservations: Reservations = NO_RESERVATIONS,
                  local_storage: bool = True) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) as Node status quantities; local_storage false
    (localStorageCapacityIsolation) leaves ephemeral-storage out of both, as the kubelet does."""
    cpu = cpu_capacity_millicores()
    mem = memory_capacity_bytes()
    disk = disk_capacity_bytes(root_dir)
    alloc = allocatable(cpu, mem, reservations, disk)
    capacity = {"cpu": str(cpu // 1000), "memory": f"{mem // 1024}Ki", "pods": str(max_pods),
                "ephemeral-storage": f"{disk // 1024}Ki"}
    allocatable_q = {"cpu": f"{alloc['cpu']}m" if alloc["cpu"] % 1000 else str(alloc["cpu"] // 1000),
                     "memory": f"{alloc['memory'] // 1024}Ki", "pods": str(max_pods),
                     "ephemeral-storage": str(alloc["ephemeral-storage"])}
    if not local_storage:
        del capacity["ephemeral-storage"], allocatable_q["ephemeral-storage"]
    return capacity, allocatable_q
