"""Field shapes of the kubelet's Summary (stats/v1alpha1): what each measurer writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.node_api.hostfs import FsInfo
from services.node_api.snapshot import Snapshot


@dataclass
class Pass:
    """What one gather shares between the node and its pods."""

    now: float
    full: bool  # False: the CPU-and-memory subset /metrics/resource needs
    snap: Snapshot
    logs_fs: FsInfo | None = None
    layer_fs: dict[str, FsInfo | None] = field(default_factory=dict)  # by writable layer mountpoint
    mount_fs: dict[str, FsInfo | None] = field(default_factory=dict)  # mounted volumes, by real path


def compact(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def fs_stats(fs: FsInfo | None, time_: float, used: int | None = None, inodes_used: int | None = None) -> dict[str, Any]:
    """An FsStats: capacity figures of the filesystem, usage of what is measured on it."""
    return compact({"time": time_, "availableBytes": fs.available if fs else None,
                    "capacityBytes": fs.capacity if fs else None, "usedBytes": used,
                    "inodesFree": fs.inodes_free if fs else None, "inodes": fs.inodes if fs else None,
                    "inodesUsed": inodes_used})


def u64(msg: Any, name: str) -> int | None:
    """A CRI UInt64Value field, None when the runtime left it out."""
    return getattr(msg, name).value if msg.HasField(name) else None


def cri_time(ns: int, default: float) -> float:
    """A CRI timestamp (ns) in seconds, or `default` when the runtime gave none."""
    return ns / 1e9 if ns > 0 else default


def add_psi(stats: dict[str, Any], psi: dict[str, dict[str, Any]], now: float) -> dict[str, Any]:
    """Pressure stall figures into a node's, pod's or container's stats: cpu.psi, memory.psi and
    io.psi, where the kubelet 1.37 has them (cgroup v2); `psi` from CgroupReader.psi."""
    for resource in ("cpu", "memory"):
        if resource in psi and isinstance(stats.get(resource), dict):
            stats[resource]["psi"] = psi[resource]
    if "io" in psi:
        stats["io"] = {"time": now, "psi": psi["io"]}
    return stats


def add_swap(stats: dict[str, Any], swap: tuple[int, int | None] | None, now: float) -> dict[str, Any]:
    """The kubelet's SwapStats of a node, pod or container: what is in use and, under a swap
    limit, what is left of it; `swap` from CgroupReader.swap."""
    if swap is not None:
        used, limit = swap
        stats["swap"] = compact({"time": now, "swapUsageBytes": used,
                                 "swapAvailableBytes": max(0, limit - used) if limit is not None else None})
    return stats
