"""The Node object and its conditions, built the way the kubelet reports them."""

from __future__ import annotations

import json
import platform
from typing import Any

from shared.host.facts import arch, os_version, read_fact
from shared.host.node_resources import NO_RESERVATIONS, Reservations, node_capacity
from shared.host.swap import swap_capacity_bytes
from shared.model.timestamps import rfc3339
from shared.model.version import DECLARED_FEATURES, KUBELET_VERSION
from shared.store import NodeHealth


def node_status_facts(name: str, root_dir: str, max_pods: int, runtime_version: str,
                      kubelet_port: int, node_ip: str,
                      reservations: Reservations = NO_RESERVATIONS, local_storage: bool = True) -> dict[str, Any]:
    """Everything in NodeStatus except conditions."""
    capacity, allocatable = node_capacity(root_dir, max_pods, reservations, local_storage)
    swap = swap_capacity_bytes()
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": [{"type": "InternalIP", "address": node_ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": read_fact("/etc/machine-id"),
            "systemUUID": read_fact("/sys/class/dmi/id/product_uuid").lower(),
            "bootID": read_fact("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": platform.release(),
            "osImage": os_version(),
            "containerRuntimeVersion": runtime_version,
            "kubeletVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": arch(),
            # The node's swap, as the kubelet reports it: only when there is some.
            **({"swap": {"capacity": swap}} if swap else {}),
        },
        "declaredFeatures": list(DECLARED_FEATURES),
    }


def node_images(recorded: str, max_images: int) -> list[dict[str, Any]] | None:
    """status.images: the first max_images (-1: all) of the images pod-sync recorded, largest
    first; None (the field removed) when there are none, as the kubelet leaves it empty. Only
    names (strings) and sizes (integers) are sent on."""
    try:
        images = json.loads(recorded or "[]")
    except ValueError:
        return None
    if not isinstance(images, list):
        return None
    if max_images > -1:
        images = images[:max_images]
    out = [{"names": [str(n) for n in img.get("names", []) if isinstance(n, str)],
            "sizeBytes": int(img.get("sizeBytes", 0))}
           for img in images if isinstance(img, dict) and isinstance(img.get("sizeBytes", 0), int)]
    return out or None


def runtime_facts(runtime: NodeHealth | None, max_images: int = 50) -> dict[str, Any]:
    """status.runtimeHandlers, status.features and status.images from what pod-sync recorded of
    the runtime's Status and images; left out while unknown, or when the runtime reports none, as
    the kubelet does. The values were written by pod-sync from CRI (JSON of bools, names and
    sizes); anything else there is not sent on."""
    out: dict[str, Any] = {}
    if runtime is None:
        return out
    out["images"] = node_images(runtime.images, max_images)
    try:
        handlers = json.loads(runtime.runtime_handlers or "[]")
        features = json.loads(runtime.runtime_features) if runtime.runtime_features else None
    except ValueError:
        return out
    if isinstance(handlers, list) and handlers:
        out["runtimeHandlers"] = [
            {"name": str(h.get("name", "")),
             "features": {k: bool(v) for k, v in (h.get("features") or {}).items()
                          if k in ("recursiveReadOnlyMounts", "userNamespaces")}}
            for h in handlers if isinstance(h, dict)]
    if isinstance(features, dict):
        out["features"] = {"supplementalGroupsPolicy": bool(features.get("supplementalGroupsPolicy"))}
    return out


# Pressure conditions as the kubelet words them: (reason, message) for False and for True, and
# the event a change of each raises.
PRESSURE = {
    "MemoryPressure": (("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                       ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
                       ("NodeHasSufficientMemory", "NodeHasInsufficientMemory")),
    "DiskPressure": (("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                     ("KubeletHasDiskPressure", "kubelet has disk pressure"),
                     ("NodeHasNoDiskPressure", "NodeHasDiskPressure")),
    "PIDPressure": (("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
                    ("NodeHasSufficientPID", "NodeHasInsufficientPID")),
}


def pressure_event(ctype: str, pressure: bool) -> str:
    return PRESSURE[ctype][2][1 if pressure else 0]


def conditions(ready: bool, not_ready_message: str, previous: list[dict[str, Any]] | None,
               pressure: dict[str, bool] | None = None) -> list[dict[str, Any]]:
    """Ready from the node's health; the pressure conditions as the eviction service decided."""
    prev = {c["type"]: c for c in previous or []}
    stamp = rfc3339()
    pressure = pressure or {}

    def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, Any]:
        old = prev.get(ctype)
        return {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == status else stamp}

    out = []
    for ctype, (ok, bad, _) in PRESSURE.items():
        under = pressure.get(ctype, False)
        out.append(cond(ctype, "True" if under else "False", *(bad if under else ok)))
    out.append(cond("Ready", "True", "KubeletReady", "kubelet is posting ready status") if ready
               else cond("Ready", "False", "KubeletNotReady", not_ready_message))
    return out
