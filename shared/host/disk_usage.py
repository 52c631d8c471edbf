"""How much a directory tree occupies on disk, like du: one bounded walk for node-api's stats
and eviction's local-storage figures."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TreeUsage:
    bytes: int
    inodes: int
    complete: bool  # False: the walk stopped at its entry limit


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _scan(path: str, dev: int, ino: int) -> list[tuple[str, os.stat_result]]:
    """The entries of the directory at path if it still is the inode (dev, ino) that was
    listed; anything else there now (a symlink, or a path redirected above it) gives []."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino):
            return []
        out = []
        with os.scandir(fd) as it:
            for entry in it:
                try:
                    out.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:
                    continue  # gone meanwhile
        return out
    except OSError:
        return []
    finally:
        os.close(fd)


def tree_usage(path: str | Path, max_entries: int | None = 10_000) -> TreeUsage | None:
    """What a directory tree occupies, like du (allocated blocks) and find | wc -l (inodes,
    the directory itself included), without following symlinks or leaving the filesystem.
    Bounded: at most max_entries entries are looked at (None: all, for a limit that must see
    everything; walk in a thread).

    The trees are pods' (emptyDirs, log dirs) and change while they are walked: a directory is
    entered only if what opens at its path, not following a symlink, is the inode that was
    listed, so one swapped for a symlink (itself or above it) is skipped, never followed."""
    try:
        top = os.lstat(path)
    except OSError:
        return None
    total, inodes, seen = top.st_blocks * 512, 1, 0
    stack = [(str(path), top.st_ino)] if stat.S_ISDIR(top.st_mode) else []
    while stack:
        current, ino = stack.pop()
        for name, st in _scan(current, top.st_dev, ino):
            seen += 1
            if max_entries is not None and seen > max_entries:
                return TreeUsage(total, inodes, False)
            total += st.st_blocks * 512
            inodes += 1
            if stat.S_ISDIR(st.st_mode) and st.st_dev == top.st_dev:
                stack.append((os.path.join(current, name), st.st_ino))
    return TreeUsage(total, inodes, True)
