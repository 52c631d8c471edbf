"""emptyDir and hostPath: volumes made of node directories (pkg/volume/emptydir, hostpath)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

from services.volume.projection import VolumeSourceError
from shared.host.mounts import is_mount_point, mount_tmpfs, remove_tree, unmount
from shared.host.node_dirs import container_dir
from shared.model.podspec import Pod
from shared.model.quantity import to_bytes


def memory_size(pod: Pod, source: dict[str, Any], node_memory: int) -> int:
    """tmpfs size, as the kubelet works it out: the least of the node's allocatable memory, the
    pod's memory limit when every container has one, and sizeLimit (so a memory-backed emptyDir
    never outgrows what the pod may use, whatever its sizeLimit says)."""
    size = node_memory
    limits = [c.resources.limits.get("memory") for c in pod.spec.containers]
    if limits and all(x is not None for x in limits):
        size = min(size, sum(to_bytes(x) for x in limits if x is not None))
    if source.get("sizeLimit"):
        size = min(size, to_bytes(source["sizeLimit"]))
    return size


async def setup_empty_dir(path: Path, pod: Pod, source: dict[str, Any], node_memory: int) -> bool:
    """True when the volume was made now (not found from an earlier setup)."""
    medium = source.get("medium", "")
    if medium not in ("", "Memory"):
        raise VolumeSourceError(f"emptyDir medium {medium!r} is not supported (use \"\" or Memory)")
    made = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    if medium == "Memory" and not is_mount_point(path):
        await mount_tmpfs(path, memory_size(pod, source, node_memory))
        made = True
    if made:
        path.chmod(0o777)  # any container user may write, as with the kubelet
    return made


async def teardown_mounted_dir(path: Path) -> None:
    """An emptyDir (tmpfs or not) or a projected volume's directory: unmount, then remove."""
    await unmount(path)
    # In a thread: an emptyDir holds as many files as the pod wrote.
    await asyncio.to_thread(remove_tree, path)


_CHECKS = {
    "Directory": (stat.S_ISDIR, "a directory"),
    "File": (stat.S_ISREG, "a file"),
    "Socket": (stat.S_ISSOCK, "a socket file"),
    "CharDevice": (stat.S_ISCHR, "a character device"),
    "BlockDevice": (stat.S_ISBLK, "a block device"),
}


def setup_host_path(source: dict[str, Any]) -> Path:
    """Check (or create) the host path per `type`; the path itself is what containers mount."""
    raw = source.get("path", "")
    if not raw or not raw.startswith("/"):
        raise VolumeSourceError(f"hostPath.path {raw!r} must be an absolute path")
    if ".." in raw.split("/"):  # as the API server refuses it
        raise VolumeSourceError(f"hostPath.path {raw[:200]!r} must not contain '..'")
    path = Path(raw)
    kind = source.get("type") or ""
    if kind == "DirectoryOrCreate":
        if not path.exists():
            container_dir(path)
        kind = "Directory"
    elif kind == "FileOrCreate":
        if not path.exists():
            # Like the kubelet, the parent directory is not created.
            if not path.parent.is_dir():
                raise VolumeSourceError(f"hostPath type check failed: parent directory of {path} does not exist "
                                        "(FileOrCreate does not create parent directories)")
            # O_EXCL: something made there meanwhile (a FIFO would block a write-only open until
            # a reader comes) is not opened; the type check below judges it.
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                pass
            else:
                os.fchmod(fd, 0o644)  # the kubelet's mode, whatever this process's umask (077)
                os.close(fd)
        kind = "File"
    if kind == "":
        return path
    if kind not in _CHECKS:
        raise VolumeSourceError(f"hostPath.type {kind!r} is not one of \"\", DirectoryOrCreate, Directory, "
                                "FileOrCreate, File, Socket, CharDevice, BlockDevice")
    check, words = _CHECKS[kind]
    try:
        mode = path.stat().st_mode
    except OSError:
        raise VolumeSourceError(f"hostPath type check failed: {path} is not {words} (it does not exist)") from None
    if not check(mode):
        raise VolumeSourceError(f"hostPath type check failed: {path} is not {words}")
    return path
