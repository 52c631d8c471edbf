"""The swap a container may use, as the kubelet 1.37 sets it (memorySwap.swapBehavior).

NoSwap (the default): the container does not swap. On cgroup v2 its memory.swap.max is 0; on
v1, where swap is counted together with memory (memory.memsw.*), its memory+swap limit is its
memory limit.
LimitedSwap (cgroup v2 only): a Burstable container whose memory request is below its limit
may swap its share of the node's swap, in proportion to its share of the node's memory
(request / MemTotal x SwapTotal). Every other container, and each one of a critical pod, gets
NoSwap. Without the swap controller where pykubelet runs, no swap setting is made at all.
"""

from __future__ import annotations

import logging

from cri_api.v1 import api_pb2 as cri

from services.pod_sync.resize import restart_policy
from services.pod_sync.static_source import CONFIG_SOURCE
from shared.host.swap import LIMITED_SWAP, NO_SWAP, SWAP_MAX, NodeSwap
from shared.model.podspec import Container, Pod
from shared.model.qos import is_critical, qos_class
from shared.model.quantity import to_bytes
from shared.store import is_static

log = logging.getLogger(__name__)

def _memory(value: str | int | float | None) -> int:
    return to_bytes(value) if value is not None else 0


def swap_behavior(pod: Pod, c: Container, qos: str, swap: NodeSwap) -> str:
    """NoSwap or LimitedSwap for this container (the kubelet's GetContainerSwapBehavior)."""
    if swap.behavior != LIMITED_SWAP or not swap.controller or not swap.cgroup_v2:
        return NO_SWAP
    # A static pod (the source its annotation names) is critical whatever its priority.
    static = is_static(pod.metadata.annotations.get(CONFIG_SOURCE, ""))
    if is_critical(pod, static):
        return NO_SWAP
    request, limit = _memory(c.resources.request("memory")), _memory(c.resources.limits.get("memory"))
    if qos != "Burstable" or (request == 0 and limit == 0) or request == limit:
        return NO_SWAP
    return LIMITED_SWAP


def limited_swap(request: int, memory_capacity: int, swap_capacity: int) -> int | None:
    """The container's share of the node's swap; None when it cannot be worked out."""
    if memory_capacity <= 0 or request > memory_capacity:
        return None
    return int(request / memory_capacity * swap_capacity)


def apply_swap(res: cri.LinuxContainerResources, pod: Pod, c: Container, qos: str, swap: NodeSwap,
               memory_capacity: int) -> None:
    """Set the container's swap limit on `res` (its memory limit is set already)."""
    if not swap.controller:
        return
    if swap_behavior(pod, c, qos, swap) == LIMITED_SWAP:
        share = limited_swap(_memory(c.resources.request("memory")), memory_capacity, swap.capacity)
        if share is not None:
            res.unified[SWAP_MAX] = str(share)
            return
        log.warning("pod %s container %s: its memory request is above the node's memory; it gets no swap",
                    pod.full_name, c.name)
    if swap.cgroup_v2:
        res.unified[SWAP_MAX] = "0"
    else:
        # memory+swap at the memory limit: nothing beyond it may be swapped (no limit: left as is).
        res.memory_swap_limit_in_bytes = res.memory_limit_in_bytes


def swap_blocks_resize(desired: Pod, allocated: Pod, swap: NodeSwap) -> bool:
    """Would an in-place resize change the memory request of a container that may swap (before
    or after), without restarting it? The kubelet 1.37 finds such a resize infeasible."""
    before = {c.name: c for c in allocated.spec.initContainers + allocated.spec.containers}
    for c in desired.spec.initContainers + desired.spec.containers:
        old = before.get(c.name)
        if old is None or _memory(c.resources.request("memory")) == _memory(old.resources.request("memory")):
            continue
        if restart_policy(old, "memory") == "RestartContainer":
            continue
        if LIMITED_SWAP in (swap_behavior(desired, c, qos_class(desired), swap),
                            swap_behavior(allocated, old, qos_class(allocated), swap)):
            return True
    return False
