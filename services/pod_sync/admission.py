"""Admitting a pod onto the node: does it fit in allocatable resources and maxPods, and may it
come while the node is under pressure?

Decisions are sticky (stored with the pod): once admitted, a pod is never rejected later, and
a rejected pod stays Failed, as with the kubelet.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter

from services.pod_sync.exec_strings import spec_exceeds
from services.pod_sync.node_affinity import AffinityInvalid, matches_node
from shared.model.pod_limits import LIMIT_EXCEEDED
from shared.model.podspec import Pod
from shared.model.qos import pod_requests, qos_class
from shared.model.sysctls import forbidden_sysctl
from shared.store import node_shutdown as shutdown

ADMISSION_REJECTIONS = Counter("kubelet_admission_rejections_total",
                               "Cumulative number pod admission rejections by the Kubelet.", ["reason"])
# The resources a pod is admitted by (the kubelet admits by the scheduler's NodeResourcesFit).
FITTED = ("cpu", "memory", "ephemeral-storage")


@dataclass
class Verdict:
    admitted: bool
    reason: str = ""
    message: str = ""


def admit(pod: Pod, admitted: list[Pod], capacity: dict[str, int], max_pods: int) -> Verdict:
    if len(admitted) + 1 > max_pods:
        return _reject("OutOfpods", "pods", 1, len(admitted), max_pods)
    return resources_fit(pod, admitted, capacity)


def resources_fit(pod: Pod, admitted: list[Pod], capacity: dict[str, int]) -> Verdict:
    """Do the pod's requests fit beside the admitted pods' (at their allocations)? A resource the
    node does not report (ephemeral-storage without localStorageCapacityIsolation) has none to
    give, as to the kubelet."""
    want = pod_requests(pod, FITTED)
    used = dict.fromkeys(FITTED, 0)
    for other in admitted:
        for name, value in pod_requests(other, FITTED).items():
            used[name] += value
    for name in FITTED:
        if want[name] and used[name] + want[name] > capacity.get(name, 0):
            return _reject(f"OutOf{name}", name, want[name], used[name], capacity.get(name, 0))
    return Verdict(True)


def admit_os(pod: Pod) -> Verdict:
    """spec.os names the OS the pod is for: this node runs Linux pods (the kubelet's
    PodOSNotSupported)."""
    if pod.spec.os is None or pod.spec.os.name == "linux":
        return Verdict(True)
    ADMISSION_REJECTIONS.labels("PodOSNotSupported").inc()
    return Verdict(False, "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS")


GROUPS_POLICY_NOT_SUPPORTED = "SupplementalGroupsPolicyNotSupported"


def admit_supplemental_groups_policy(pod: Pod, runtime_supports: bool) -> Verdict:
    """supplementalGroupsPolicy Strict only where the runtime says it can keep the image's groups
    out (the Node's status.features.supplementalGroupsPolicy; containerd 2.0 and newer), as the
    kubelet admits it; Merge, or no policy, everywhere."""
    if pod.spec.securityContext.supplementalGroupsPolicy != "Strict" or runtime_supports:
        return Verdict(True)
    ADMISSION_REJECTIONS.labels(GROUPS_POLICY_NOT_SUPPORTED).inc()
    return Verdict(False, GROUPS_POLICY_NOT_SUPPORTED, "SupplementalGroupsPolicy=Strict is not supported in this node")


def admit_to_node(pod: Pod, labels: dict[str, str], node_name: str) -> Verdict:
    """The kubelet's NodeAffinity predicate: nodeSelector and required node affinity."""
    try:
        fits = matches_node(pod, labels, node_name)
    except AffinityInvalid as exc:
        ADMISSION_REJECTIONS.labels("NodeAffinity").inc()
        return Verdict(False, "NodeAffinity", f"Predicate NodeAffinity failed: spec.affinity.nodeAffinity: {exc}")
    if fits:
        return Verdict(True)
    ADMISSION_REJECTIONS.labels("NodeAffinity").inc()
    return Verdict(False, "NodeAffinity", "Predicate NodeAffinity failed")


def _reject(reason: str, resource: str, requested: int, used: int, capacity: int) -> Verdict:
    ADMISSION_REJECTIONS.labels(reason).inc()
    return Verdict(False, reason,
                   f"Pod was rejected: Node didn't have enough resource: {resource}, requested: "
                   f"{requested}, used: {used}, capacity: {capacity}")


EVICTED = "Evicted"
MEMORY_PRESSURE_TAINT = "node.kubernetes.io/memory-pressure"


def _tolerates_memory_pressure(pod: Pod) -> bool:
    """Does a toleration match the taint node.kubernetes.io/memory-pressure:NoSchedule?"""
    for t in (pod.spec.model_extra or {}).get("tolerations") or []:
        if not isinstance(t, dict) or t.get("effect") not in (None, "", "NoSchedule"):
            continue
        key, operator = t.get("key") or "", t.get("operator") or "Equal"
        if key and key != MEMORY_PRESSURE_TAINT:
            continue
        if operator == "Exists" or (key and operator == "Equal" and not t.get("value")):
            return True
    return False


def admit_under_pressure(pod: Pod, pressure: list[str], critical: bool) -> Verdict:
    """The eviction manager's admission: under MemoryPressure alone no BestEffort pod (unless it
    tolerates the memory-pressure taint), under any other pressure nothing; critical pods always."""
    if not pressure or critical:
        return Verdict(True)
    if pressure == ["MemoryPressure"] and (qos_class(pod) != "BestEffort" or _tolerates_memory_pressure(pod)):
        return Verdict(True)
    ADMISSION_REJECTIONS.labels(EVICTED).inc()
    return Verdict(False, EVICTED, f"The node had condition: [{' '.join(pressure)}]. ")


# A node shutdown's reasons: a pod stopped by it, a pod turned away during it.
SHUTDOWN_REASONS = (shutdown.TERMINATED, shutdown.NOT_ADMITTED)


def admit_unless_shutting_down(shutting_down: bool) -> Verdict:
    """The node shutdown manager's admission: nothing new starts on a node going down."""
    if not shutting_down:
        return Verdict(True)
    ADMISSION_REJECTIONS.labels(shutdown.NOT_ADMITTED).inc()
    return Verdict(False, shutdown.NOT_ADMITTED, shutdown.NOT_ADMITTED_MESSAGE)


SYSCTL_FORBIDDEN = "SysctlForbidden"


def admit_sysctls(pod: Pod, allowed_unsafe: list[str]) -> Verdict:
    why = forbidden_sysctl(pod, allowed_unsafe)
    if not why:
        return Verdict(True)
    ADMISSION_REJECTIONS.labels(SYSCTL_FORBIDDEN).inc()
    return Verdict(False, SYSCTL_FORBIDDEN, f"forbidden sysctl: {why}")


def admit_exec_strings(pod: Pod) -> Verdict:
    """Refuse a pod whose spec alone gives a container more environment, command and args than
    the kernel would exec (exec_strings.py): it could never start, and trying would cost memory."""
    why = spec_exceeds(pod)
    if why is None:
        return Verdict(True)
    ADMISSION_REJECTIONS.labels(LIMIT_EXCEEDED).inc()
    return Verdict(False, LIMIT_EXCEEDED, f"Pod was rejected: {why}")
