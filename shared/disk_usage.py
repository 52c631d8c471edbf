"""How much a directory tree occupies on disk, like du: one bounded walk for node-api's stats
and eviction's local-storage figures."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TreeUsage:
    bytes: int
    inodes: int
    complete: bool  # False: the walk stopped at its entry limit


def tree_usage(path: str | Path, max_entries: int = 10_000) -> TreeUsage | None:
    """What a directory tree occupies, like du (allocated blocks) and find | wc -l (inodes,
    the directory itself included), without following symlinks or leaving the filesystem.
    Bounded: at most max_entries entries are looked at."""
    try:
        top = os.lstat(path)
    except OSError:
        return None
    total, inodes, seen = top.st_blocks * 512, 1, 0
    stack = [str(path)] if os.path.isdir(path) and not os.path.islink(path) else []
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > max_entries:
                return TreeUsage(total, inodes, False)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += st.st_blocks * 512
            inodes += 1
            if entry.is_dir(follow_symlinks=False) and st.st_dev == top.st_dev:
                stack.append(entry.path)
    return TreeUsage(total, inodes, True)
