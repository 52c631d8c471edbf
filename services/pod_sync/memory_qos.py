"""memory.high from memoryThrottlingFactor, as the kubelet 1.37 sets it (its MemoryQoS feature,
on by default there; cgroup v2 only, where memory.high exists).

memory.high is where the kernel starts reclaiming a cgroup's memory and throttling its
allocations, below the limit where it would kill: request + factor x (limit - request), rounded
down to a page. A container without a memory limit of its own takes the node's allocatable
memory as its limit (before the eviction thresholds: capacity minus the reservations, as the
kubelet's GetNodeAllocatableAbsolute); one whose request is its limit (Guaranteed) gets none, and neither does a
value not above the request. A pod with pod-level resources gets one on its own cgroup too, from
its requests and limits. Unset (the kubelet's default), memory.high stays "max".
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from services.pod_sync.pod_cgroup import pod_limits
from shared.model.podspec import Container, Pod
from shared.model.qos import pod_level, pod_requests
from shared.model.quantity import to_bytes

log = logging.getLogger(__name__)

PAGE = os.sysconf("SC_PAGE_SIZE")
MEMORY_HIGH = "memory.high"


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
