"""subPath mounts a container cannot redirect (CVE-2017-1002101), the way the kubelet fixed it.

A container can write into its volumes, so it can plant a symlink where another container's
subPath will be looked up, or swap a checked directory for a symlink before it is mounted. A
path checked by name and later bind-mounted by name is therefore never safe. Instead:

- the subPath is resolved once, checked to stay inside the volume, then walked component by
  component from an fd of the volume with O_NOFOLLOW; missing directories are made through those
  fds (mkdirat), never by name;
- the final fd is bind-mounted through /proc/self/fd/N, which the kernel resolves to that inode
  and nothing a container can change, onto <pod dir>/volume-subpaths/<volume>/<container>/<index>;
- the container's mount is that bind mount. It lies outside every volume, so no container can
  touch it; a later start of the same container reuses it (as the kubelet does), so what the
  container swaps in afterwards is never seen.

pod-sync makes these mounts at container start; the volume service removes them before it tears
the pod's volumes down.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from shared.host.mounts import MountError, bind_mount_fd, is_mount_point, mounts_under, remove_tree, unmount_all_under
from shared.host.safe_paths import beneath, component

SUBPATHS_DIR = "volume-subpaths"

_WALK = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class SubPathError(ValueError):
    """A subPath that cannot be mounted safely; the message names the mount, never host paths
    beyond the volume (the kubelet's words: 'failed to prepare subPath for volumeMount ...')."""


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    for p in parts:
        component(p, "subPath component")
    return parts


def _step(parent_fd: int, name: str) -> int:
    """Open name beneath parent_fd without following it; a symlink is refused, not opened."""
    fd = os.open(name, _WALK, dir_fd=parent_fd)
    if stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{name!r} turned into a symlink")
    return fd


def open_beneath(volume: Path, sub_path: str, make_dirs: bool = True) -> int:
    """An O_PATH fd of volume/sub_path that is inside the volume, made (as directories, with the
    volume's mode) where missing. Symlinks that stay inside the volume are allowed as the kubelet
    allows them: resolved first, then the resolved path is walked without following anything."""
    base = os.path.realpath(volume)
    resolved = os.path.realpath(os.path.join(base, sub_path))
    if not _within(resolved, base):
        raise OSError("resolves outside the volume")
    parts = _parts(os.path.relpath(resolved, base)) if resolved != base else []
    fd = os.open(base, _WALK | os.O_DIRECTORY)
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    try:
        for name in parts:
            try:
                nxt = _step(fd, name)
            except FileNotFoundError:
                if not make_dirs:
                    raise
                os.mkdir(name, mode, dir_fd=fd)
                nxt = _step(fd, name)
                if not stat.S_ISDIR(os.fstat(nxt).st_mode):
                    os.close(nxt)
                    raise OSError(f"{name!r} was replaced while being made") from None
                _set_mode(nxt, mode)  # mkdirat is subject to the umask
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _set_mode(path_fd: int, mode: int) -> None:
    fd = os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def bind_target(pod_dir: Path, volume: str, container: str, index: int) -> Path:
    return pod_dir.joinpath(SUBPATHS_DIR, component(volume, "volume name"), component(container, "container name"),
                            str(index))


def prepare(pod_dir: Path, volume_path: Path, volume: str, container: str, index: int, sub_path: str) -> Path:
    """The host path to give the runtime for volumeMounts[index] of container: a bind mount of
    the subPath made from an fd (made once; reused by later starts)."""
    target = bind_target(pod_dir, volume, container, index)
    if is_mount_point(target):
        return target
    what = f'volumeMount "{volume}" of container "{container}"'
    try:
        fd = open_beneath(volume_path, sub_path)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SubPathError(f"failed to prepare subPath for {what}: {sub_path!r}: {reason}") from None
    try:
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        target.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        if is_dir:
            target.mkdir(mode=0o750, exist_ok=True)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640))
        try:
            bind_mount_fd(fd, target)
        except MountError as exc:
            remove_tree(target)
            raise SubPathError(f"failed to prepare subPath for {what}: {exc}") from None
    finally:
        os.close(fd)
    return target


def clean(pod_dir: Path) -> None:
    """Unmount and remove every subPath bind mount of the pod (MountError when one stays)."""
    root = pod_dir / SUBPATHS_DIR
    if not root.exists():
        return
    left = unmount_all_under(root)
    if left or mounts_under(root):
        raise MountError(f"subPath mounts still mounted: {'; '.join(left) or ', '.join(mounts_under(root))}")
    remove_tree(root)


class SubPathMounts:
    """The subPath mounts of the pods under one pods dir (pod-sync's view of this module)."""

    def __init__(self, pods_dir: Path) -> None:
        self.pods_dir = pods_dir

    def mount(self, pod_uid: str, volume: str, volume_path: Path, container: str, index: int, sub_path: str) -> Path:
        return prepare(beneath(self.pods_dir, pod_uid), volume_path, volume, container, index, sub_path)


class FakeSubPathMounts:
    """Records requests and answers with the plain path, for unit tests that cannot mount."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int, str]] = []
        self.refuse: dict[str, str] = {}  # subPath -> reason

    def mount(self, pod_uid: str, volume: str, volume_path: Path, container: str, index: int, sub_path: str) -> Path:
        self.requests.append((pod_uid, volume, index, sub_path))
        if sub_path in self.refuse:
            raise SubPathError(f'failed to prepare subPath for volumeMount "{volume}" of container "{container}": '
                               f"{self.refuse[sub_path]}")
        return volume_path / sub_path
