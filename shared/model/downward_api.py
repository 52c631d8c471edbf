"""Downward API values: what a pod may learn about itself through env vars and volume files.

Shared by pod-sync (env vars) and volume (downwardAPI and projected volume files) so both give
the same answer for the same field."""

from __future__ import annotations

import math

from shared.model.json_types import JSONObject
from shared.model.podspec import Container, Pod
from shared.model.quantity import millicores, parse_quantity, to_bytes


def metadata_field(pod: Pod, path: str) -> str:
    """metadata.* fields; None-free strings the way the kubelet formats them."""
    m = pod.metadata
    simple = {"metadata.name": m.name, "metadata.namespace": m.namespace, "metadata.uid": pod.uid}
    if path in simple:
        return simple[path]
    for prefix, mapping in (("metadata.labels", m.labels), ("metadata.annotations", m.annotations)):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return mapping.get(path[len(prefix) + 2:-2], "")
        if path == prefix:
            return "\n".join(f'{k}="{v}"' for k, v in sorted(mapping.items()))
    raise ValueError(f"fieldRef.fieldPath {path!r} is not supported")


def resource_field(pod: Pod, c: Container | None, ref: JSONObject, node_millicores: int, node_memory: int) -> str:
    """resourceFieldRef: a limit falls back to node allocatable when unset, as in the kubelet."""
    if ref.get("containerName"):
        c = next((x for x in pod.spec.initContainers + pod.spec.containers if x.name == ref["containerName"]), None)
        if c is None:
            raise ValueError(f"resourceFieldRef.containerName {ref['containerName']!r} is not in the pod")
    if c is None:
        raise ValueError("resourceFieldRef.containerName is required in a volume")
    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise ValueError(f"resourceFieldRef.resource {resource!r} is not supported")
    value = (c.resources.limits if kind == "limits" else c.resources.requests).get(name)
    if value is None and kind == "limits" and pod.spec.resources is not None:
        value = pod.spec.resources.limits.get(name)  # pod-level limits, where the pod has them
    if value is None:
        if kind == "requests":
            return "0"
        value = f"{node_millicores}m" if name == "cpu" else str(node_memory)
    divisor = float(parse_quantity(ref.get("divisor") or "1"))
    if divisor < 0:
        raise ValueError(f"resourceFieldRef.divisor {ref.get('divisor')!r} must not be negative")
    if divisor == 0:  # the API server defaults an unset divisor to "0": the kubelet reads it as 1
        divisor = 1.0
    if name == "cpu":
        return str(max(1, math.ceil(millicores(value) / 1000 / divisor)))
    return str(math.ceil(to_bytes(value) / divisor))
