"""Swap on the node, as the kubelet 1.37 finds it (NodeSwap, GA): how much there is, whether
pykubelet can limit it per container, and what memorySwap.swapBehavior gives containers.

The per-container decision lives with the container's resources (services/pod_sync/swap.py);
this module only reads the host, so host checks, pod-sync and the Node's status agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.host.facts import parse_meminfo

NO_SWAP = "NoSwap"
LIMITED_SWAP = "LimitedSwap"
SWAP_MAX = "memory.swap.max"  # cgroup v2's swap limit, as CRI's `unified` names it


@dataclass(frozen=True)
class NodeSwap:
    """What containers' swap settings depend on; read once at start.

    controller: the kernel can limit swap where pykubelet runs (cgroup v2: memory.swap.max in
    its own cgroup, as the root has none; v1: memory.memsw.*). Without it the kubelet sets no
    swap limit at all, and neither does pykubelet."""

    behavior: str = NO_SWAP
    cgroup_v2: bool = False
    controller: bool = False
    capacity: int = 0  # SwapTotal, bytes


def swap_capacity_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    """The node's swap (SwapTotal): what the Node reports and LimitedSwap shares out."""
    try:
        return parse_meminfo(meminfo.read_text()).get("SwapTotal", 0)
    except OSError:
        return 0


def own_cgroup_v2(proc: Path = Path("/proc")) -> str | None:
    """This process's cgroup in the unified tree ("0::/path" in /proc/self/cgroup), or None."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::/"):
            return line[3:]
    return None


def swap_controller(cgroup_root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc")) -> bool:
    """Can swap be limited per cgroup here? The kubelet's checkSwapControllerAvailability."""
    if not (cgroup_root / "cgroup.controllers").exists():
        return (cgroup_root / "memory" / "memory.memsw.limit_in_bytes").exists()
    own = own_cgroup_v2(proc)
    if own is None or any(part == ".." for part in own.split("/")):
        return False
    return (cgroup_root / own.lstrip("/") / SWAP_MAX).exists()


def node_swap(behavior: str, cgroup_root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc")) -> NodeSwap:
    """memorySwap.swapBehavior ("" is NoSwap) with what this host offers."""
    return NodeSwap(behavior=behavior or NO_SWAP, cgroup_v2=(cgroup_root / "cgroup.controllers").exists(),
                    controller=swap_controller(cgroup_root, proc), capacity=swap_capacity_bytes(proc / "meminfo"))


def limited_swap_problem(swap: NodeSwap) -> str | None:
    """Why LimitedSwap would give no container any swap on this host (None: it works).

    The kubelet quietly falls back to NoSwap here; pykubelet refuses to start instead, so a
    node never looks configured for swap when no container can use it."""
    if swap.behavior != LIMITED_SWAP:
        return None
    if not swap.cgroup_v2:
        return ("memorySwap.swapBehavior: LimitedSwap needs cgroup v2 (containers get NoSwap on cgroup v1): "
                "boot the host with systemd.unified_cgroup_hierarchy=1 or set swapBehavior to NoSwap")
    if not swap.controller:
        return (f"memorySwap.swapBehavior: LimitedSwap needs the swap controller ({SWAP_MAX} in pykubelet's "
                "cgroup) and this kernel has none: boot it without swapaccount=0 or set swapBehavior to NoSwap")
    return None
