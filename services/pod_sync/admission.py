"""Admitting a pod onto the node: does it fit in allocatable resources and maxPods?

Decisions are sticky (stored with the pod): once admitted, a pod is never rejected later, and
a rejected pod stays Failed, as with the kubelet.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter


from shared.podspec import Pod
from shared.qos import pod_requests

ADMISSION_REJECTIONS = Counter("kubelet_admission_rejections_total",
                               "Cumulative number pod admission rejections by the Kubelet.", ["reason"])


@dataclass
class Verdict:
    admitted: bool
    reason: str = ""
    message: str = ""


def admit(pod: Pod, admitted: list[Pod], capacity: dict[str, int], max_pods: int) -> Verdict:
    if len(admitted) + 1 > max_pods:
        return _reject("OutOfpods", "pods", 1, len(admitted), max_pods)
    want = pod_requests(pod)
    used = {"cpu": 0, "memory": 0}
    for other in admitted:
        for name, value in pod_requests(other).items():
            used[name] += value
    for name in ("cpu", "memory"):
        if want[name] and used[name] + want[name] > capacity[name]:
            return _reject(f"OutOf{name}", name, want[name], used[name], capacity[name])
    return Verdict(True)


def _reject(reason: str, resource: str, requested: int, used: int, capacity: int) -> Verdict:
    ADMISSION_REJECTIONS.labels(reason).inc()
    return Verdict(False, reason,
                   f"Pod was rejected: Node didn't have enough resource: {resource}, requested: "
                   f"{requested}, used: {used}, capacity: {capacity}")
