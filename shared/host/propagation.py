"""The root dir on a shared mount, as the kubelet makes it at start (MakeRShared of its root dir).

Mount propagation needs it: containerd refuses a `Bidirectional` volume whose host path is not
on a shared mount and a `HostToContainer` one that is neither shared nor a slave. With the root
dir shared, what a privileged container (a CSI node plugin) mounts below a pod's or a plugin's
directory appears on the host, and from there in every other pod that mounts it
HostToContainer.

Where the root dir is not already on a shared mount, it is bind-mounted onto itself and that
mount made rshared. The bind is recursive (where the kubelet's is not): a pykubelet upgraded
under running pods keeps their volume mounts reachable at their paths."""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from shared.host.mounts import MountError, unescape_mountinfo

log = logging.getLogger(__name__)

_MS_BIND, _MS_REC, _MS_SHARED = 4096, 16384, 1 << 20
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)
MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo (proc(5))."""
    id: int
    parent: int
    device: str   # major:minor
    root: str     # the directory of the filesystem that is mounted here
    point: str
    tags: tuple[str, ...]  # the optional fields: shared:N, master:N, propagate_from:N, unbindable

    @property
    def shared(self) -> bool:
        return any(t.startswith("shared:") for t in self.tags)


def parse_mountinfo(text: str) -> list[MountEntry]:
    entries = []
    for line in text.splitlines():
        parts = line.split()
        if "-" not in parts or len(parts) < 7:
            continue
        sep = parts.index("-")
        entries.append(MountEntry(int(parts[0]), int(parts[1]), parts[2], unescape_mountinfo(parts[3]),
                                  unescape_mountinfo(parts[4]),
                                  tuple(parts[6:sep])))
    return entries


def containing_mount(path: Path, entries: list[MountEntry]) -> MountEntry:
    """The mount a path is on: the deepest mount point at or above it, the last mounted of
    those at the same point (the one on top)."""
    target = os.path.realpath(path)
    best: MountEntry | None = None
    for e in entries:
        inside = target == e.point or target.startswith(e.point.rstrip("/") + "/")
        if inside and (best is None or len(e.point) >= len(best.point)):
            best = e
    if best is None:
        raise MountError(f"no mount holds {target}")
    return best


def is_self_bind(path: Path, entries: list[MountEntry]) -> bool:
    """Is path's top mount a bind of path onto itself (what make_rshared makes), rather than a
    filesystem of its own (a disk mounted at /var/lib/kubelet)?"""
    target = os.path.realpath(path)
    top = containing_mount(path, entries)
    if top.point != target:
        return False
    parent = next((e for e in entries if e.id == top.parent), None)
    if parent is None or parent.device != top.device:
        return False
    inside_parent = os.path.relpath(target, parent.point)
    return os.path.normpath(os.path.join(parent.root, inside_parent)) == top.root


def _mount(source: Path, target: Path, flags: int) -> None:
    if _libc.mount(os.fsencode(source), os.fsencode(target), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise MountError(f"mount of {target} (flags {flags:#x}) failed: {os.strerror(err)}")


def make_rshared(path: Path, mountinfo: Path = MOUNTINFO) -> bool:
    """Put path on a shared mount; True when that took a bind mount of its own (False: it
    already was shared). Raises MountError saying what to do when the host does not allow it."""
    if containing_mount(path, parse_mountinfo(mountinfo.read_text())).shared:
        log.debug("%s is already on a shared mount", path)
        return False
    try:
        _mount(path, path, _MS_BIND | _MS_REC)
        _mount(path, path, _MS_SHARED | _MS_REC)
    except MountError as exc:
        raise MountError(f"the root dir {path} cannot be made a shared mount ({exc}); mount propagation "
                         f"needs it. Run pykubelet as root in the host's mount namespace.") from None
    log.info("bind-mounted the root dir %s onto itself with shared propagation (mount propagation)", path)
    return True


def release_rshared(path: Path, mountinfo: Path = MOUNTINFO) -> bool:
    """Undo make_rshared's bind when the node is taken down with its pods; a root dir that is a
    filesystem of its own, or still has mounts below it, is left as it is. True if unmounted."""
    entries = parse_mountinfo(mountinfo.read_text())
    target = os.path.realpath(path)
    if not is_self_bind(path, entries):
        return False
    top = containing_mount(path, entries)
    if any(e.parent == top.id for e in entries):
        log.warning("the root dir %s still has mounts below it; leaving its shared bind mount", target)
        return False
    # Detached rather than unmounted: the node's own processes (containerd, the bus) may still
    # hold files open through it; they keep them, the path shows the directory beneath.
    if _libc.umount2(os.fsencode(target), _MNT_DETACH) != 0:
        log.warning("could not unmount the root dir's bind mount %s: %s", target, os.strerror(ctypes.get_errno()))
        return False
    return True
