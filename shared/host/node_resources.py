"""The node's capacity and allocatable resources, as the kubelet computes them.

allocatable = capacity - kubeReserved - systemReserved - the hard eviction thresholds
(memory.available for memory, nodefs.available for ephemeral-storage), never below zero.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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


def allocatable(cpu_millicores: int, memory_bytes: int, reservations: Reservations = NO_RESERVATIONS,
                disk_bytes: int = 0) -> dict[str, int]:
    hard = hard_eviction_reservation(list(reservations.thresholds), memory_bytes, disk_bytes)
    return {
        "cpu": max(0, cpu_millicores - reservations.reserved_amount("cpu")),
        "memory": max(0, memory_bytes - reservations.reserved_amount("memory") - hard["memory"]),
        "ephemeral-storage": max(0, disk_bytes - reservations.reserved_amount("ephemeral-storage")
                                 - hard["ephemeral-storage"]),
    }


def pods_cgroup_limits(cpu_millicores: int, memory_bytes: int, reservations: Reservations) -> dict[str, int]:
    """What enforceNodeAllocatable=pods puts on /kubepods: capacity minus the reservations, but
    not minus the hard eviction thresholds, so the node evicts before the kernel kills."""
    return {"cpu": max(0, cpu_millicores - reservations.reserved_amount("cpu")),
            "memory": max(0, memory_bytes - reservations.reserved_amount("memory"))}


def disk_capacity_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def node_capacity(root_dir: str, max_pods: int,
                  reservations: Reservations = NO_RESERVATIONS) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) as Node status quantities."""
    cpu = cpu_capacity_millicores()
    mem = memory_capacity_bytes()
    disk = disk_capacity_bytes(root_dir)
    alloc = allocatable(cpu, mem, reservations, disk)
    capacity = {"cpu": str(cpu // 1000), "memory": f"{mem // 1024}Ki", "pods": str(max_pods),
                "ephemeral-storage": f"{disk // 1024}Ki"}
    allocatable_q = {"cpu": f"{alloc['cpu']}m" if alloc["cpu"] % 1000 else str(alloc["cpu"] // 1000),
                     "memory": f"{alloc['memory'] // 1024}Ki", "pods": str(max_pods),
                     "ephemeral-storage": str(alloc["ephemeral-storage"])}
    return capacity, allocatable_q
