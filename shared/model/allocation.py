"""A pod's allocation: the resources the node granted each of its containers, and the pod
itself where it has pod-level resources, which may differ from the spec's while an in-place
resize waits (pod-sync writes it on DesiredPod.allocated, services/pod_sync/resize.py decides
it; eviction ranks pods by it, as the kubelet does)."""

from __future__ import annotations

from typing import Any

from shared.model.podspec import Container, Pod, ResourceRequirements
from shared.model.quantity import parse_quantity

# container name -> {"requests": {...}, "limits": {...}}, quantities as the spec wrote them
Resources = dict[str, dict[str, Any]]
Allocation = dict[str, Resources]

RESIZABLE = ("cpu", "memory")
# The allocation's entry of the pod-level resources (spec.resources), present when the pod has
# them: no container has this name (a container's name is a DNS label).
POD_LEVEL = ""


def requirements(r: ResourceRequirements) -> Resources:
    return {"requests": {k: str(v) for k, v in r.requests.items()},
            "limits": {k: str(v) for k, v in r.limits.items()}}


def resources_of(c: Container) -> Resources:
    return requirements(c.resources)


def spec_allocation(pod: Pod) -> Allocation:
    """What the pod's spec asks for, per container (init, sidecar and app containers), and its
    pod-level resources under POD_LEVEL."""
    out = {c.name: resources_of(c) for c in pod.spec.initContainers + pod.spec.containers}
    if pod.spec.resources is not None:
        out[POD_LEVEL] = requirements(pod.spec.resources)
    return out


def effective(own: Resources, pod_level: Resources | None) -> Resources:
    """What a container runs with: its own resources, with the pod-level CPU and memory limits
    for those it sets none of (the kubelet's GetLimits, as its cgroup gets them)."""
    pod_limits = (pod_level or {}).get("limits") or {}
    limits = dict(own.get("limits") or {})
    for resource in RESIZABLE:
        if resource not in limits and resource in pod_limits:
            limits[resource] = pod_limits[resource]
    return {"requests": dict(own.get("requests") or {}), "limits": limits}


def effective_of(pod: Pod, c: Container) -> Resources:
    return effective(resources_of(c), requirements(pod.spec.resources) if pod.spec.resources is not None else None)


def quantity_of(entry: Resources | None, kind: str, name: str) -> Any:
    """entry's kind (requests/limits) of resource name as a number, None when it has none."""
    value = ((entry or {}).get(kind) or {}).get(name)
    return None if value is None else parse_quantity(value)


def changed(old: Resources | None, new: Resources | None) -> set[str]:
    """The resources (cpu, memory) whose request or limit differs, compared as quantities:
    "1000m" is "1"."""
    return {name for name in RESIZABLE for kind in ("requests", "limits")
            if quantity_of(old, kind, name) != quantity_of(new, kind, name)}


def same(a: Allocation, b: Allocation) -> bool:
    return a.keys() == b.keys() and not any(changed(a[name], b[name]) for name in a)


def with_allocation(pod: Pod, allocation: Allocation) -> Pod:
    """The pod with each container's resources as allocated: what its containers start with and
    what admission counts for it. The pod itself when they already agree."""
    if same(spec_allocation(pod), allocation):
        return pod

    def granted_resources(r: ResourceRequirements, entry: Resources) -> ResourceRequirements:
        return r.model_copy(update={"requests": dict(entry.get("requests") or {}),
                                    "limits": dict(entry.get("limits") or {})})

    def granted(c: Container) -> Container:
        entry = allocation.get(c.name)
        if entry is None:
            return c
        return c.model_copy(update={"resources": granted_resources(c.resources, entry)})

    update: dict[str, Any] = {"initContainers": [granted(c) for c in pod.spec.initContainers],
                              "containers": [granted(c) for c in pod.spec.containers]}
    if pod.spec.resources is not None and (own := allocation.get(POD_LEVEL)) is not None:
        update["resources"] = granted_resources(pod.spec.resources, own)
    return pod.model_copy(update={"spec": pod.spec.model_copy(update=update)})
