"""Paths under the node's root dir built only from names that cannot lead out of it.

Pod UIDs, container and volume names, CSI driver names become directory names under
<root>/pods and <root>/plugins, where root creates and removes files. Each name must be one
plain path component, and the directories it is joined under must resolve beneath the root (a
symlink planted on the way out is refused), so no input can make a create or a remove land
elsewhere on the host.

Files a pod controls (what a container wrote into a volume or at its terminationMessagePath,
container logs) are read with read_head / read_tail: a container can leave a FIFO there (a
plain open() would wait for a writer forever), a device node (mknod is a default capability;
opening /dev/sda or a watchdog on the host has effects), a symlink to a host file, or gigabytes.
The path is taken with O_PATH | O_NOFOLLOW, which opens nothing; only when fstat says that very
inode is a regular file is it opened for reading, through /proc/self/fd (so no swap between the
check and the open is possible), non-blocking, and at most `limit` bytes are read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafePath(ValueError):
    """A name or path that would lead out of its root; the message says which."""


def component(name: str, what: str = "name") -> str:
    """One plain path component: not empty, not '.' or '..', no '/' and no NUL."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name or len(name) > 255:
        raise UnsafePath(f"{what} {str(name)[:80]!r} is not a plain file name")
    return name


def beneath(root: Path, *names: str) -> Path:
    """root/names..., each name one component, its parent resolving beneath root's real path."""
    for name in names:
        component(name)
    path = root.joinpath(*names)
    real_root = os.path.realpath(root)
    real_parent = os.path.realpath(path.parent)
    if real_parent != real_root and not real_parent.startswith(real_root.rstrip(os.sep) + os.sep):
        raise UnsafePath(f"{path} leads out of {root} (to {real_parent})")
    return path


class NotRegularFile(OSError):
    """A pod-controlled path that is not a regular file; `kind` says what it is ("a FIFO", "a
    symbolic link", ...) for a status message, str() adds the path for a log line."""

    def __init__(self, path: str | Path, kind: str) -> None:
        super().__init__(f"{path} is {kind}, not a regular file")
        self.kind = kind


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def open_regular(path: str | Path) -> int:
    """A read-only fd of path if it is a regular file, else NotRegularFile; other failures are
    open()'s own (FileNotFoundError, ...). The last component is never followed; directories
    above it must be the node's own (use beneath() for names from a pod)."""
    path_fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return reopen_regular(path_fd, path)
    finally:
        os.close(path_fd)


def reopen_regular(path_fd: int, path: str | Path) -> int:
    """A read-only, non-blocking fd of the inode an O_PATH fd holds, if it is a regular file, else
    NotRegularFile naming `path`. Through /proc/self/fd: that very inode, no swap possible."""
    mode = os.fstat(path_fd).st_mode
    if not stat.S_ISREG(mode):
        kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
        raise NotRegularFile(path, kind)
    return os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)


def _read_at_most(fd: int, limit: int, offset: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        chunk = os.pread(fd, min(left, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_head(path: str | Path, limit: int) -> bytes:
    """At most the first `limit` bytes of a regular file (see open_regular)."""
    fd = open_regular(path)
    try:
        return _read_at_most(fd, limit, 0)
    finally:
        os.close(fd)


def read_tail(path: str | Path, limit: int) -> bytes:
    """At most the last `limit` bytes of a regular file (see open_regular), as the kubelet's
    tail.ReadAtMost: what the file holds from `limit` bytes before its end when opened."""
    fd = open_regular(path)
    try:
        return _read_at_most(fd, limit, max(0, os.fstat(fd).st_size - limit))
    finally:
        os.close(fd)
