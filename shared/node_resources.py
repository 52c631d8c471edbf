"""The node's capacity and allocatable resources, as the kubelet computes them."""

from __future__ import annotations

import os

from shared.host import cpu_capacity_millicores, memory_capacity_bytes

# The kubelet's default hard eviction thresholds are kept out of allocatable.
EVICTION_HARD_MEMORY = 100 * 2**20
EVICTION_HARD_NODEFS_FRACTION = 0.10


def allocatable(cpu_millicores: int, memory_bytes: int) -> dict[str, int]:
    return {"cpu": cpu_millicores, "memory": max(0, memory_bytes - EVICTION_HARD_MEMORY)}


def node_capacity(root_dir: str, max_pods: int) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) as Node status quantities."""
    cpu = cpu_capacity_millicores()
    mem = memory_capacity_bytes()
    st = os.statvfs(root_dir)
    disk = st.f_blocks * st.f_frsize
    alloc = allocatable(cpu, mem)
    capacity = {"cpu": str(cpu // 1000), "memory": f"{mem // 1024}Ki", "pods": str(max_pods),
                "ephemeral-storage": f"{disk // 1024}Ki"}
    allocatable_q = {"cpu": f"{alloc['cpu']}m" if alloc["cpu"] % 1000 else str(alloc["cpu"] // 1000),
                     "memory": f"{alloc['memory'] // 1024}Ki", "pods": str(max_pods),
                     "ephemeral-storage": str(int(disk * (1 - EVICTION_HARD_NODEFS_FRACTION)))}
    return capacity, allocatable_q
