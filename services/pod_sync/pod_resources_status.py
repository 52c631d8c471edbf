"""The pod-level resources in a pod's status (InPlacePodLevelResourcesVerticalScaling, on by
default in Kubernetes 1.36+, which the kubelet reports for every pod):

- `status.allocatedResources`: what the node granted the pod, its requests (the pod-level ones,
  else its containers' together, as the scheduler counts them);
- `status.resources`: what its pod cgroup has: the CPU request from cpu.shares, the CPU limit
  from the quota, the memory limit; the memory request is the allocation's, since no cgroup
  holds it. While a resize is under way it is read from the cgroup, so a resize that failed
  halfway shows where the pod is; otherwise it is what pod-sync wrote there
  (pod_cgroup.pod_cgroup_config), which the cgroup has.

Before the pod cgroup exists the kubelet reports the allocation itself; pykubelet reports what
the cgroup will get, which is the same but for a pod where only some containers set a limit
(the kubelet then sums theirs; no limit goes on the cgroup).
"""

from __future__ import annotations

import math
from typing import TypedDict

from services.pod_sync.pod_cgroup import PodCgroupConfig
from shared.model.podspec import Pod
from shared.model.qos import pod_requests
from shared.model.quantity import format_binary, format_millicores, millicores

# The kubelet's floors below which a cgroup's value says nothing (cm.MinShares, MinMilliCPULimit).
MIN_MILLI_REQUEST = 2
MIN_MILLI_LIMIT = 10


class PodResources(TypedDict, total=False):
    allocatedResources: dict[str, str]
    resources: dict[str, dict[str, str]]


def _format(name: str, value: int) -> str:
    if name == "cpu":
        return format_millicores(value)
    return format_binary(value) if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-") \
        else str(value)


def _names(pod: Pod) -> tuple[str, ...]:
    names = {n for c in pod.spec.initContainers + pod.spec.containers for n in {**c.resources.limits, **c.resources.requests}}
    if pod.spec.resources is not None:
        names |= {n for n in pod.spec.resources.requests if n in ("cpu", "memory")}
    return tuple(sorted(names))


def allocated_resources(pod: Pod) -> dict[str, str]:
    """The pod's requests (kubelet: resourcehelper.PodRequests), without the zero ones; a
    pod-level request as the spec writes it (the kubelet copies the quantity: "10m" of memory
    stays "10m", where bytes would round it)."""
    out = {name: _format(name, value) for name, value in pod_requests(pod, _names(pod)).items() if value}
    own = pod.spec.resources
    for name, value in (own.requests.items() if own is not None else ()):
        if name in ("cpu", "memory") or name.startswith("hugepages-"):
            out[name] = str(value)
    return out


def pod_resources(pod: Pod, cgroup: PodCgroupConfig) -> PodResources:
    """pod: as allocated; cgroup: what its pod cgroup has (or gets)."""
    allocated = allocated_resources(pod)
    own = pod.spec.resources
    requests = {k: str(v) for k, v in own.requests.items()} if own is not None else {}
    limits = {k: str(v) for k, v in own.limits.items()} if own is not None else {}
    asked_cpu = millicores(own.requests["cpu"]) if own is not None and "cpu" in own.requests else 0
    # cpu.shares back to millicores, rounded up (the kubelet's SharesToMilliCPU)
    milli = math.ceil(cgroup.cpu_shares * 1000 / 1024) if cgroup.cpu_shares >= MIN_MILLI_REQUEST else 0
    if milli > MIN_MILLI_REQUEST or asked_cpu > MIN_MILLI_REQUEST:
        requests["cpu"] = format_millicores(milli)
    if "memory" not in requests and "memory" in allocated:
        requests["memory"] = allocated["memory"]
    if cgroup.cpu_quota is not None:
        quota_milli = cgroup.cpu_quota * 1000 // cgroup.cpu_period
        asked_limit = millicores(limits["cpu"]) if "cpu" in limits else 0
        if quota_milli > MIN_MILLI_LIMIT or asked_limit > MIN_MILLI_LIMIT:
            limits["cpu"] = format_millicores(quota_milli)
    if cgroup.memory_limit is not None:
        limits["memory"] = format_binary(cgroup.memory_limit)
    out: PodResources = {"resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}
    if allocated:
        out["allocatedResources"] = allocated
    return out
