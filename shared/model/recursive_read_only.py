"""Recursive read-only mounts (volumeMounts[].recursiveReadOnly, GA in Kubernetes 1.33), resolved
as the kubelet resolves them for a container: whether its mount is asked of the runtime read-only
with every submount (CRI Mount.recursive_read_only), given whether the runtime's handler says it
can (RuntimeHandlerFeatures.recursive_read_only_mounts; containerd 2.0 and newer on Linux 5.12
and newer). The same answer is the container status' volumeMounts[].recursiveReadOnly."""

from __future__ import annotations

from shared.model.go_text import go_quote
from shared.model.podspec import VolumeMount


class RecursiveReadOnlyError(ValueError):
    """The mount cannot be made as asked; the message is the kubelet's."""


def resolve(mount: VolumeMount, runtime_supports: bool) -> bool:
    """True: mount it recursively read-only. Disabled (or unset) never; IfPossible where the
    runtime can; Enabled only where it can, else the container is not created."""
    mode = mount.recursiveReadOnly
    if mode in (None, "Disabled"):
        return False
    if not mount.readOnly:  # the API server refuses this; a static pod is validated the same way
        raise RecursiveReadOnlyError(f"volume {go_quote(mount.name)} requested recursive read-only mode, but it is "
                                     "not read-only")
    if mount.mountPropagation not in (None, "None"):
        raise RecursiveReadOnlyError(f"volume {go_quote(mount.name)} requested recursive read-only mode, but it is "
                                     f"not compatible with propagation {go_quote(str(mount.mountPropagation))}")
    if mode == "IfPossible":
        return runtime_supports
    if not runtime_supports:
        raise RecursiveReadOnlyError(f"volume {go_quote(mount.name)} requested recursive read-only mode, but it is not "
                                     "supported by the runtime")
    return True


def status_mode(mount: VolumeMount, runtime_supports: bool) -> str:
    """The container status' recursiveReadOnly of a read-only mount, as the kubelet reports it:
    Enabled when it is mounted so, else Disabled (a mount that cannot be made included)."""
    try:
        return "Enabled" if resolve(mount, runtime_supports) else "Disabled"
    except RecursiveReadOnlyError:
        return "Disabled"
