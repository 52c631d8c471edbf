"""In-place pod resize, the decisions: what a pod's containers are allocated, whether a resize
the API server accepted fits the node, and what a running container needs to get there.

The kubelet's model (pkg/kubelet/allocation, kuberuntime): the spec's resources are what the pod
asks for; the *allocation* is what the node granted (admission sets it, a resize that fits
replaces it); the *actuated* resources are what the runtime was last given for a container
(at CreateContainer, or by UpdateContainerResources). Containers always start with their
allocation, and a running container whose actuated resources differ is updated in place, or
restarted where its resizePolicy says RestartContainer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from services.pod_sync.admission import resources_fit
from shared.model.allocation import Allocation, Resources, changed, effective_of, resources_of
from shared.model.pod_status import PodCondition
from shared.model.podspec import Container, Pod
from shared.model.qos import pod_requests
from shared.store.models import ResizeCondition

DEFERRED = "Deferred"
INFEASIBLE = "Infeasible"
ERROR = "Error"
PENDING_CONDITION = "PodResizePending"
IN_PROGRESS_CONDITION = "PodResizeInProgress"


def restart_policy(c: Container, resource: str) -> str:
    """The container's resizePolicy for one resource: NotRequired unless it says otherwise."""
    for p in c.resizePolicy:
        if p.resourceName == resource:
            return p.restartPolicy
    return "NotRequired"


def needs_restart(c: Container, old: Resources | None, new: Resources) -> bool:
    return any(restart_policy(c, name) == "RestartContainer" for name in changed(old, new))


@dataclass
class Decision:
    allocate: bool
    reason: str = ""  # Deferred or Infeasible when not
    message: str = ""


def decide(resized: Pod, static: bool, others: list[Pod], capacity: dict[str, int],
           guaranteed_cpu_under_static_policy: bool = False,
           guaranteed_memory_under_static_policy: bool = False, swap_memory_change: bool = False) -> Decision:
    """Does a resize fit the node? `resized` has the new requests, `others` are every other
    admitted pod at its allocation (the kubelet's canResizePod). The last flag: the resize
    changes the CPU of a Guaranteed pod on a node with the static CPU manager (or its memory with
    the Static memory manager), which the kubelet 1.37 does not do. swap_memory_change: the memory
    request of a container that may swap changes without a restart (services/pod_sync/swap.py)."""
    if static:
        return Decision(False, INFEASIBLE, "In-place resize of static-pods is not supported")
    if swap_memory_change:
        return Decision(False, INFEASIBLE, "In-place resize of containers with swap is not supported.")
    if guaranteed_cpu_under_static_policy:
        return Decision(False, INFEASIBLE, 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"')
    if guaranteed_memory_under_static_policy:
        return Decision(False, INFEASIBLE,
                        'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"')
    want = pod_requests(resized)
    for name in ("memory", "cpu"):  # the kubelet names memory first
        if want[name] > capacity[name]:
            return Decision(False, INFEASIBLE, f"Node didn't have enough capacity: {name}, requested: "
                                               f"{want[name]}, capacity: {capacity[name]}")
    verdict = resources_fit(resized, others, capacity)
    if not verdict.admitted:
        return Decision(False, DEFERRED, verdict.message.removeprefix("Pod was rejected: "))
    return Decision(True)


def event_message(prefix: str, pod: Pod, allocation: Allocation, generation: int | None,
                  error: str = "") -> str:
    """The kubelet's resize event text: a prefix, then the resources as JSON."""
    def listed(containers: list[Container]) -> list[dict[str, Any]]:
        return [{"name": c.name, "resources": {k: v for k, v in allocation.get(c.name, resources_of(c)).items() if v}}
                for c in containers]

    body: dict[str, Any] = {}
    if pod.spec.initContainers:
        body["initContainers"] = listed(pod.spec.initContainers)
    body["containers"] = listed(pod.spec.containers)
    if generation is not None:
        body["generation"] = generation
    if error:
        body["error"] = error
    return f"{prefix}: {json.dumps(body, separators=(',', ':'))}"


def condition(kind: str, state: ResizeCondition) -> PodCondition:
    """A v1 PodCondition from the stored state of a resize condition."""
    out: PodCondition = {"type": kind, "status": "True", "lastProbeTime": None,
                         "lastTransitionTime": state.get("since")}
    generation = state.get("generation")
    if generation is not None:
        out["observedGeneration"] = generation
    if state.get("reason"):
        out["reason"] = state["reason"]
    if state.get("message"):
        out["message"] = state["message"]
    return out


def created_with(annotation: str | None) -> Resources | None:
    """The resources a container was created with, from its annotation; None when it has none
    or it cannot be read (the container is then updated to its allocation)."""
    if not annotation:
        return None
    try:
        value = json.loads(annotation)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(isinstance(value.get(k, {}), dict) for k in ("requests", "limits")):
        return None
    try:
        changed(value, None)  # every quantity parses
    except (ValueError, TypeError):
        return None
    return {"requests": dict(value.get("requests") or {}), "limits": dict(value.get("limits") or {})}


def annotation(pod: Pod, c: Container) -> str:
    """What the container is created with, pod-level limits included (allocation.effective)."""
    return json.dumps(effective_of(pod, c), separators=(",", ":"), sort_keys=True)


@dataclass
class MemoryLimitChange:
    """A memory limit a resize sets: on the pod's cgroup (name "") or on a container's."""
    name: str
    new: int
    old: int | None  # None: no limit now
    usage: int | None  # bytes in use now; None when it could not be read

    @property
    def lowers(self) -> bool:
        return self.old is None or self.new < self.old


def memory_limits_below_usage(changes: list[MemoryLimitChange]) -> str:
    """The kubelet's validateMemoryResizeAction: a memory limit a resize adds or lowers must stay
    above what is in use now, or the resize fails (an Error, tried again) before anything is
    changed, rather than leaving the kernel to reclaim or refuse halfway. "" when it fits."""
    errors = []
    for change in changes:
        if not change.lowers:
            continue
        what = "pod" if not change.name else f'container "{change.name}"'
        if change.usage is None:
            errors.append(f"missing {what} memory usage")
        elif change.usage >= change.new:
            errors.append(f"attempting to set {what} memory limit ({change.new}) below current usage ({change.usage})")
    if not errors:
        return ""
    return "cannot decrease memory limits: " + (errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
