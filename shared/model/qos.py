"""Pod QoS class and effective requests, computed as the kubelet does (pkg/apis/core/v1/helper/qos)."""

from __future__ import annotations

from decimal import Decimal

from shared.model.podspec import Container, Pod, ResourceRequirements
from shared.model.quantity import millicores, parse_quantity, to_bytes

COMPUTE = ("cpu", "memory")


def pod_level(pod: Pod) -> ResourceRequirements | None:
    """The pod's own resources (spec.resources), None when it sets none: an empty
    `resources: {}` counts as none, as the kubelet 1.36+ reads it."""
    r = pod.spec.resources
    return r if r is not None and (r.requests or r.limits) else None


def _pod_level_qos(r: ResourceRequirements) -> str:
    """QoS from pod-level resources alone (the kubelet's resourceQOS): cpu and memory."""
    def value(d: dict[str, str | int | float], name: str) -> Decimal:
        q = d.get(name)
        return parse_quantity(q) if q is not None else Decimal(0)

    requests = {n: value(r.requests, n) if n in r.requests else value(r.limits, n) for n in COMPUTE}
    limits = {n: value(r.limits, n) for n in COMPUTE}
    if not any(requests.values()) and not any(limits.values()):
        return "BestEffort"
    if all(requests[n] == limits[n] and limits[n] > 0 for n in COMPUTE):
        return "Guaranteed"
    return "Burstable"


def qos_class(pod: Pod) -> str:
    if (own := pod_level(pod)) is not None:
        return _pod_level_qos(own)
    requests: dict[str, object] = {}
    limits: dict[str, object] = {}
    guaranteed = True
    for c in pod.spec.initContainers + pod.spec.containers:
        r = c.resources
        for name in COMPUTE:
            req = r.request(name)
            if req is not None and parse_quantity(req) > 0:
                requests[name] = req
            lim = r.limits.get(name)
            if lim is not None and parse_quantity(lim) > 0:
                limits[name] = lim
        if not all(n in r.limits for n in COMPUTE):
            guaranteed = False
        # Both limits are set, so each effective request is the request or else the limit.
        elif any(parse_quantity(r.requests.get(n, r.limits[n])) != parse_quantity(r.limits[n]) for n in COMPUTE):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_requests(pod: Pod, names: tuple[str, ...] = COMPUTE) -> dict[str, int]:
    """What the pod needs from the node: max(sum of app containers, largest init container)
    (sidecars run alongside everything, so they add to both), in millicores and bytes, for
    each resource of names (pod-level requests are for CPU and memory only)."""
    def need(c: Container, name: str) -> int:
        q = c.resources.request(name)
        if q is None:
            return 0
        return millicores(q) if name == "cpu" else to_bytes(q)

    out: dict[str, int] = {}
    sidecars = pod.spec.sidecars
    for name in names:
        side = sum(need(c, name) for c in sidecars)
        apps = sum(need(c, name) for c in pod.spec.containers) + side
        inits = max((need(c, name) + side for c in pod.spec.initContainers if c not in sidecars), default=0)
        out[name] = max(apps, inits)
    # Pod-level requests replace the containers' for each resource they name.
    if (own := pod_level(pod)) is not None:
        for name in names:
            if name in COMPUTE and (q := own.request(name)) is not None:
                out[name] = millicores(q) if name == "cpu" else to_bytes(q)
    return out


SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def is_critical(pod: Pod, static: bool) -> bool:
    """The kubelet's critical pods: static, mirror, or at system-critical priority
    (system-node-critical, system-cluster-critical). Never evicted, admitted under pressure."""
    if static or MIRROR_ANNOTATION in pod.metadata.annotations:
        return True
    return (pod.spec.priority or 0) >= SYSTEM_CRITICAL_PRIORITY
