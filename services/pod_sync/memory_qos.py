"""memory.high from memoryThrottlingFactor, as the kubelet 1.37 sets it (its MemoryQoS feature,
on by default there; cgroup v2 only, where memory.high exists).

memory.high is where the kernel starts reclaiming a cgroup's memory and throttling its
allocations, below the limit where it would kill: request + factor x (limit - request), rounded
down to a page. A container without a memory limit of its own takes the node's allocatable
memory as its limit (before the eviction thresholds: capacity minus the reservations, as the
kubelet's GetNodeAllocatableAbsolute); one whose request is its limit (Guaranteed) gets none, and neither does a
value not above the request. A pod with pod-level resources gets one on its own cgroup too, from
its requests and limits. Unset (the kubelet's default), memory.high stays "max".

memory.min and memory.low come from memoryReservationPolicy. With TieredReservation a
Guaranteed pod's memory request is protected outright (memory.min: the kernel never reclaims
it) and a Burstable pod's softly (memory.low: reclaimed only when nothing unprotected is left),
on the container, on the pod's cgroup and, summed, on the QoS tiers above them, since the kernel
protects a cgroup only as far as its ancestors are protected too. With None, the default, every
one of them is 0, which also clears what an earlier TieredReservation run left on the tiers.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from services.pod_sync.pod_cgroup import pod_limits
from shared.model.podspec import Container, Pod
from shared.model.qos import pod_level, pod_requests, qos_class
from shared.model.quantity import to_bytes

log = logging.getLogger(__name__)

PAGE = os.sysconf("SC_PAGE_SIZE")
MEMORY_HIGH = "memory.high"
MEMORY_MIN = "memory.min"
MEMORY_LOW = "memory.low"
MEMORY_OOM_GROUP = "memory.oom.group"
TIERED = "TieredReservation"


@dataclass(frozen=True)
class MemoryThrottling:
    factor: float     # memoryThrottlingFactor, in (0, 1]
    allocatable: int  # capacity minus the reservations, bytes: the limit of a container without one
    page: int = PAGE


def memory_throttling(factor: float | None, cgroup_root: Path, allocatable: int) -> MemoryThrottling | None:
    """The node's throttling from memoryThrottlingFactor; None without it, or on cgroup v1, which
    has no memory.high (the kubelet sets none there either; the log says so)."""
    if factor is None:
        return None
    if not (cgroup_root / "cgroup.controllers").is_file():
        log.warning("memoryThrottlingFactor %s: memory.high exists on cgroup v2 only and this host runs cgroup v1, "
                    "so no container gets one (as with the kubelet)", factor)
        return None
    return MemoryThrottling(factor, allocatable)


def _high(request: int, limit: int, factor: float, page: int) -> int:
    # In the kubelet's float arithmetic and order, so both round to the same page.
    return int(math.floor(float(request) + (float(limit) - float(request)) * factor) / float(page)) * page


def container_memory_high(c: Container, pod: Pod | None, t: MemoryThrottling) -> int | None:
    """The container's memory.high, None for none."""
    request_q, limit_q = c.resources.request("memory"), c.resources.limits.get("memory")
    request = to_bytes(request_q) if request_q is not None else 0
    limit = to_bytes(limit_q) if limit_q is not None else 0
    own = pod_level(pod) if pod is not None else None
    if limit == 0 and own is not None and own.limits.get("memory") is not None:
        return None  # the pod's cgroup throttles it (pod_memory_high)
    if request == limit and request != 0:
        return None
    ceiling = limit or t.allocatable
    if ceiling <= 0:
        return None
    high = _high(request, ceiling, t.factor, t.page)
    return high if high > request else None


def pod_memory_high(pod: Pod, t: MemoryThrottling) -> int | None:
    """The pod cgroup's memory.high: only with pod-level resources, and a memory limit declared
    (the pod's, or every container's)."""
    own = pod_level(pod)
    if own is None:
        return None
    limit = pod_limits(pod, "memory")
    request = pod_requests(pod)["memory"]
    if limit is None or limit == 0 or (request == limit and request != 0):
        return None
    high = _high(request, limit, t.factor, t.page)
    return high if high > request else None


@dataclass(frozen=True)
class MemoryProtection:
    """memoryReservationPolicy on cgroup v2; tiered: TieredReservation, else None (all zeros)."""
    tiered: bool


def oom_group(single_process_oom_kill: bool | None, cgroup_root: Path) -> bool:
    """Whether containers get memory.oom.group 1, as the kubelet 1.37 gives them: on cgroup v2
    unless singleProcessOOMKill is true. An OOM kill then ends every process of the container,
    not one of them (a worker killed under a supervisor that lives on would leave a container
    that runs but does not work). cgroup v1 has no such file: one process is killed there."""
    return (cgroup_root / "cgroup.controllers").is_file() and not single_process_oom_kill


def memory_protection(policy: str, cgroup_root: Path) -> MemoryProtection | None:
    """The node's memory protection; None on cgroup v1, which has neither file (the kubelet
    sets neither there; the log says so when TieredReservation was asked for)."""
    if not (cgroup_root / "cgroup.controllers").is_file():
        if policy == TIERED:
            log.warning("memoryReservationPolicy %s: memory.min and memory.low exist on cgroup v2 only and this "
                        "host runs cgroup v1, so no pod is protected (as with the kubelet)", policy)
        return None
    return MemoryProtection(policy == TIERED)


def _protected(pod: Pod, request: int) -> dict[str, int]:
    """The protection of `request` bytes of a pod of this QoS class: hard for Guaranteed, soft
    for Burstable."""
    if request <= 0:
        return {}
    return {MEMORY_MIN if qos_class(pod) == "Guaranteed" else MEMORY_LOW: request}


def container_memory_protection(c: Container, pod: Pod, p: MemoryProtection) -> dict[str, str]:
    """The container's memory.min / memory.low for the CRI's unified map: its memory request
    with TieredReservation, both 0 otherwise (a container resized or recreated under None keeps
    no stale protection)."""
    request_q = c.resources.request("memory")
    request = to_bytes(request_q) if request_q is not None else 0
    if p.tiered and request > 0:
        return {k: str(v) for k, v in _protected(pod, request).items()}
    return {MEMORY_MIN: "0", MEMORY_LOW: "0"}


def pod_memory_protection(pod: Pod, p: MemoryProtection) -> dict[str, int]:
    """The pod cgroup's memory.min / memory.low: its memory request, with TieredReservation only
    (a new pod cgroup starts at 0)."""
    return _protected(pod, pod_requests(pod)["memory"]) if p.tiered else {}


def tier_memory_protection(pods: list[Pod], p: MemoryProtection) -> tuple[int, int]:
    """(the Guaranteed pods' memory requests, the Burstable pods') that the QoS tiers protect:
    kubepods takes memory.min of both and memory.low of the Burstable ones, the Burstable tier
    memory.low of its own. Both 0 under None."""
    if not p.tiered:
        return 0, 0
    totals = {"Guaranteed": 0, "Burstable": 0}
    for pod in pods:
        qos = qos_class(pod)
        if qos in totals:
            totals[qos] += pod_requests(pod)["memory"]
    return totals["Guaranteed"], totals["Burstable"]
