"""A container's ID as the Kubernetes API spells it, `<runtime>://<id>` (the kubelet's
ContainerID), and back to the ID the runtime knows. pykubelet's runtime is containerd."""

from __future__ import annotations

RUNTIME_TYPE = "containerd"


def api_container_id(runtime_id: str) -> str:
    """The runtime's ID as containerStatuses[].containerID has it."""
    return f"{RUNTIME_TYPE}://{runtime_id}"


def runtime_container_id(api_id: str) -> str:
    """`containerd://<id>` -> `<id>`; an ID without a type is taken as it is ("" stays "")."""
    _, sep, rest = api_id.partition("://")
    return rest if sep else api_id
