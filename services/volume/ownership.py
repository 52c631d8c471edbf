"""fsGroup: a volume's files belong to the pod's group, as the kubelet's SetVolumeOwnership
makes them: group fsGroup, group read (read-only volumes: secret, configMap, downwardAPI,
projected) or read-write (emptyDir), directories setgid so new files inherit the group.

The walk goes through directory fds and takes each entry with O_PATH | O_NOFOLLOW, then changes
that very inode through /proc/self/fd: a symlink a container planted in an emptyDir is skipped,
never followed, cannot be swapped in between the check and the change, and a device node is never
opened (opening some has effects), only regular files and directories are touched.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

RW_MASK, RO_MASK, EXEC_MASK = 0o660, 0o440, 0o110
_OPEN_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def _fix(fd: int, fs_group: int, read_only: bool) -> bool:
    """Change the inode behind an O_PATH fd, if it is a regular file or a directory."""
    st = os.fstat(fd)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return False  # symlinks, devices, fifos, sockets: left alone
    mask = RO_MASK if read_only else RW_MASK
    if stat.S_ISDIR(st.st_mode):
        mask |= stat.S_ISGID | EXEC_MASK
    inode = f"/proc/self/fd/{fd}"
    os.chown(inode, -1, fs_group)
    os.chmod(inode, stat.S_IMODE(st.st_mode) | mask)
    return True


def _root_matches(path: Path, fs_group: int, read_only: bool) -> bool:
    st = os.lstat(path)
    mask = (RO_MASK if read_only else RW_MASK) | stat.S_ISGID | EXEC_MASK
    return st.st_gid == fs_group and stat.S_IMODE(st.st_mode) & mask == mask


def set_volume_ownership(path: Path, fs_group: int, read_only: bool, policy: str | None = None) -> int:
    """Apply fsGroup to everything below path; returns how many entries were changed.
    policy "OnRootMismatch": nothing to do when the volume's root already has the group and mode."""
    if policy == "OnRootMismatch" and _root_matches(path, fs_group, read_only):
        return 0
    changed = 0
    root_fd = os.open(path, _OPEN_FLAGS | os.O_DIRECTORY)
    try:
        changed += _fix(root_fd, fs_group, read_only)
    finally:
        os.close(root_fd)
    for _dirpath, dirnames, filenames, dirfd in os.fwalk(path, follow_symlinks=False):
        for name in dirnames + filenames:
            try:
                fd = os.open(name, _OPEN_FLAGS, dir_fd=dirfd)
            except FileNotFoundError:
                continue  # gone meanwhile
            try:
                changed += _fix(fd, fs_group, read_only)
            finally:
                os.close(fd)
    return changed
