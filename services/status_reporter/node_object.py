"""The Node object and its conditions, built the way the kubelet reports them."""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from shared.node_resources import node_capacity
from shared.version import KUBELET_VERSION


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return "Linux"


def _arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def node_labels(name: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": _arch(),
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": _arch()}


def node_status_facts(name: str, root_dir: str, max_pods: int, runtime_version: str,
                      kubelet_port: int, node_ip: str) -> dict[str, Any]:
    """Everything in NodeStatus except conditions."""
    capacity, allocatable = node_capacity(root_dir, max_pods)
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": [{"type": "InternalIP", "address": node_ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": _read("/etc/machine-id"),
            "systemUUID": _read("/sys/class/dmi/id/product_uuid").lower(),
            "bootID": _read("/proc/sys/kernel/random/boot_id"),
            "kernelVersion": platform.release(),
            "osImage": _os_image(),
            "containerRuntimeVersion": runtime_version,
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": _arch(),
        },
    }


def conditions(ready: bool, not_ready_message: str, previous: list[dict] | None) -> list[dict[str, Any]]:
    """Ready from the node's health; the pressure conditions are False until eviction reports."""
    prev = {c["type"]: c for c in previous or []}
    stamp = now()

    def cond(ctype: str, status: str, reason: str, message: str) -> dict[str, Any]:
        old = prev.get(ctype)
        return {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == status else stamp}

    return [
        cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        cond("Ready", "True", "KubeletReady", "kubelet is posting ready status") if ready
        else cond("Ready", "False", "KubeletNotReady", not_ready_message),
    ]
