"""Which pod goes first, and what the kubelet tells its owner.

Ranking as the kubelet's eviction manager ranks:
- memory: pods using more than they requested first, then lower priority, then by how far
  usage is above the request;
- local storage (ephemeral-storage, inodes): the same with ephemeral-storage;
- pids: lower priority, then more processes.
Static pods, mirror pods and pods at system-critical priority are never evicted.
"""

from __future__ import annotations

from typing import Callable

from services.eviction.pod_usage import ActivePod, PodUsage
from shared.model.podspec import Pod
from shared.model.qos import is_critical as is_critical_pod
from shared.model.quantity import to_bytes
from shared.store import is_static

NODE_LOW_MESSAGE = "The node was low on resource: {resource}. "
CONTAINER_MESSAGE = "Container {name} was using {usage}, which exceeds its request of {request}. "
EMPTY_DIR_MESSAGE = 'Usage of EmptyDir volume "{volume}" exceeds the limit "{limit}". '
POD_STORAGE_MESSAGE = "Pod ephemeral local storage usage exceeds the total limit of containers {limit}. "
CONTAINER_STORAGE_MESSAGE = 'Container {name} exceeded its local ephemeral storage limit "{limit}". '

_BINARY = [("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)]


def binary_quantity(n: int) -> str:
    """Bytes as the API prints a binary-SI quantity: the largest suffix that divides exactly."""
    for suffix, size in _BINARY:
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


def is_critical(p: ActivePod) -> bool:
    return is_critical_pod(p.pod, static=is_static(p.source))


def _request(pod: Pod, resource: str) -> int:
    total = 0
    for c in pod.spec.containers:
        q = c.resources.request(resource)
        total += to_bytes(q) if q is not None else 0
    return total


def _rank(pods: list[ActivePod], usage_of: Callable[[ActivePod], int | None], resource: str) -> list[ActivePod]:
    def key(p: ActivePod) -> tuple[int, int, int]:
        used = usage_of(p)
        if used is None:  # no figures: nothing to say it is the culprit
            return (1, 1, 0)
        above = used - _request(p.pod, resource)
        return (0 if above > 0 else 1, p.pod.spec.priority or 0, -above)
    return sorted(pods, key=key)


def rank(pods: list[ActivePod], usage: dict[str, PodUsage], resource: str) -> list[ActivePod]:
    """Candidates in eviction order; critical pods are left out."""
    candidates = [p for p in pods if not is_critical(p)]
    if resource == "memory":
        return _rank(candidates, lambda p: usage[p.uid].memory if p.uid in usage else None, "memory")
    if resource == "pids":
        return sorted(candidates, key=lambda p: (p.pod.spec.priority or 0,
                                                 -(usage[p.uid].processes if p.uid in usage else 0)))
    return _rank(candidates, lambda p: usage[p.uid].local_storage if p.uid in usage else None,
                 "ephemeral-storage")


def eviction_message(resource: str, p: ActivePod, usage: PodUsage | None) -> str:
    """The kubelet's words: the starved resource, then each container above its request."""
    message = NODE_LOW_MESSAGE.format(resource=resource)
    if usage is None or resource not in ("memory", "ephemeral-storage"):
        return message
    for c in p.pod.spec.containers:
        used = (usage.containers_memory.get(c.name) if resource == "memory"
                else usage.container_storage(c.name))
        written = c.resources.request(resource)
        request = to_bytes(written) if written is not None else 0
        if used is not None and used > request:
            message += CONTAINER_MESSAGE.format(name=c.name, usage=binary_quantity(used),
                                                request=written if written is not None else "0")
    return message


def storage_limit_violation(p: ActivePod, usage: PodUsage) -> str:
    """The kubelet's message when the pod broke a local-storage limit, else ''. Checked in the
    kubelet's order: emptyDir sizeLimit, the pod's total, each container."""
    for v in p.pod.spec.volumes:
        used, limit = p.empty_dirs.get(v.name, (0, 0))
        if v.kind == "emptyDir" and limit and used > limit:
            return EMPTY_DIR_MESSAGE.format(volume=v.name, limit=v.source.get("sizeLimit", binary_quantity(limit)))
    limits = {c.name: q for c in p.pod.spec.containers
              if (q := c.resources.limits.get("ephemeral-storage")) is not None}
    if not limits:
        return ""
    pod_limit = sum(to_bytes(v) for v in limits.values())
    container_total = sum(usage.container_storage(n) or 0 for n in (c.name for c in p.pod.spec.containers))
    if container_total + usage.volumes > pod_limit:
        return POD_STORAGE_MESSAGE.format(limit=binary_quantity(pod_limit))
    for name, written in limits.items():
        stored = usage.container_storage(name)
        if stored is not None and stored > to_bytes(written):
            return CONTAINER_STORAGE_MESSAGE.format(name=name, limit=written)
    return ""


def has_storage_limits(p: ActivePod) -> bool:
    return any(limit for _, limit in p.empty_dirs.values()) or any(
        "ephemeral-storage" in c.resources.limits for c in p.pod.spec.containers)
