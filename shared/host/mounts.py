"""Mounting and unmounting, and removing directories without ever reaching into a mount.

Removing a pod directory while something is still mounted below it deletes the contents of that
mount (a CSI volume's data, a hostPath bound by a plugin): the reason for the kubelet's
"orphaned pod ... volume paths are still present on disk" guard. Every removal here checks the
mount table first and refuses.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

MOUNT_TIMEOUT = 30.0


class MountError(Exception):
    pass


def unescape_mountinfo(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo (octal).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_points() -> dict[str, str]:
    """Mount point -> filesystem type, from this process's mount namespace."""
    points: dict[str, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            points[unescape_mountinfo(parts[4])] = parts[sep + 1]
    return points


def is_mount_point(path: Path) -> bool:
    return str(path) in mount_points()


def fs_type(path: Path) -> str:
    return mount_points().get(str(path), "")


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below path, compared on the normalised and the real path, so
    '..', '//' or a symlink on the way cannot hide a mount from the guard."""
    found: set[str] = set()
    points = mount_points()
    for form in {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}:
        prefix = form.rstrip("/") + "/"
        found.update(p for p in points if p == form or p.startswith(prefix))
    return sorted(found)


def remove_tree(path: Path) -> None:
    """Remove a directory tree that must hold no mounts; raise MountError naming them if it does."""
    if not path.exists() and not path.is_symlink():
        return
    left = mounts_under(path)
    if left:
        raise MountError(f"not removing {path}: still mounted: {', '.join(left)}")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


async def _run(*argv: str) -> None:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), MOUNT_TIMEOUT)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise MountError(f"{' '.join(argv)} did not finish in {MOUNT_TIMEOUT:.0f}s") from None
    if proc.returncode != 0:
        raise MountError(f"{' '.join(argv)} failed: {out.decode(errors='replace').strip()}")


_MS_BIND = 4096
_libc = ctypes.CDLL(None, use_errno=True)


def bind_mount_fd(fd: int, target: Path) -> None:
    """Bind-mount the file an fd is open on (O_PATH is enough) onto target. The kernel follows
    /proc/self/fd/N to the open inode itself, whatever has since been renamed or swapped by name;
    mount(8) would canonicalise the path first, so the syscall is made directly."""
    if _libc.mount(f"/proc/self/fd/{fd}".encode(), os.fsencode(target), None, _MS_BIND, None) != 0:
        err = ctypes.get_errno()
        raise MountError(f"bind mount onto {target} failed: {os.strerror(err)}")


TMPFS_NOSWAP_KERNEL = (6, 4)  # the first kernel whose tmpfs takes `noswap`


def kernel_release_at_least(release: str, want: tuple[int, int]) -> bool:
    """"6.18.44-fc-v1272" -> (6, 18) >= want; an unreadable release is taken as older."""
    found = re.match(r"(\d+)\.(\d+)", release)
    return found is not None and (int(found.group(1)), int(found.group(2))) >= want


def _in_user_namespace(uid_map: Path = Path("/proc/self/uid_map")) -> bool:
    try:
        return uid_map.read_text().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


@functools.cache
def tmpfs_noswap_supported() -> bool:
    """Does tmpfs take `noswap` here? As the kubelet decides: never in a user namespace (the
    kernel refuses it there), always from 6.4, otherwise by trying it once (a backport)."""
    if _in_user_namespace():
        return False
    if kernel_release_at_least(os.uname().release, TMPFS_NOSWAP_KERNEL):
        return True
    probe = tempfile.mkdtemp(prefix="tmpfs-noswap-test-")
    try:
        tried = subprocess.run(["mount", "-t", "tmpfs", "-o", "noswap", "tmpfs", probe], capture_output=True,
                               timeout=MOUNT_TIMEOUT)
        if tried.returncode == 0:
            subprocess.run(["umount", probe], capture_output=True, timeout=MOUNT_TIMEOUT)
        return tried.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        try:
            os.rmdir(probe)
        except OSError:
            pass


async def mount_tmpfs(path: Path, size_bytes: int | None, mode: str = "0777") -> None:
    """A memory-backed volume. With `noswap` where the kernel has it, as the kubelet mounts them:
    a secret or token written there never reaches a swap device."""
    options = [f"mode={mode}"] + ([f"size={size_bytes}"] if size_bytes else []) + \
        (["noswap"] if tmpfs_noswap_supported() else [])
    await _run("mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(path))


def unmount_all_under(path: Path) -> list[str]:
    """Unmount everything below `path`, deepest first (a local node being taken down with its
    pods); returns what could not be unmounted."""
    left = []
    for point in sorted(mounts_under(path), key=len, reverse=True):
        res = subprocess.run(["umount", point], capture_output=True, text=True, timeout=MOUNT_TIMEOUT)
        if res.returncode != 0:
            left.append(f"{point}: {res.stderr.strip()}")
    return left


async def unmount(path: Path) -> None:
    """Unmount if mounted; a path that is not a mount point is fine."""
    if is_mount_point(path):
        await _run("umount", str(path))
