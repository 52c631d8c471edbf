"""A pod's allocation: the resources the node granted each of its containers, which may differ
from the spec's while an in-place resize waits (pod-sync writes it on DesiredPod.allocated,
services/pod_sync/resize.py decides it; eviction ranks pods by it, as the kubelet does)."""

from __future__ import annotations

from typing import Any

from shared.model.podspec import Container, Pod
from shared.model.quantity import parse_quantity

# container name -> {"requests": {...}, "limits": {...}}, quantities as the spec wrote them
Resources = dict[str, dict[str, Any]]
Allocation = dict[str, Resources]

RESIZABLE = ("cpu", "memory")


def resources_of(c: Container) -> Resources:
    return {"requests": {k: str(v) for k, v in c.resources.requests.items()},
            "limits": {k: str(v) for k, v in c.resources.limits.items()}}


def spec_allocation(pod: Pod) -> Allocation:
    """What the pod's spec asks for, per container (init, sidecar and app containers)."""
    return {c.name: resources_of(c) for c in pod.spec.initContainers + pod.spec.containers}


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

    def granted(c: Container) -> Container:
        entry = allocation.get(c.name)
        if entry is None:
            return c
        resources = c.resources.model_copy(update={"requests": dict(entry.get("requests") or {}),
                                                   "limits": dict(entry.get("limits") or {})})
        return c.model_copy(update={"resources": resources})

    spec = pod.spec.model_copy(update={"initContainers": [granted(c) for c in pod.spec.initContainers],
                                       "containers": [granted(c) for c in pod.spec.containers]})
    return pod.model_copy(update={"spec": spec})
