"""The node's own directories and state are private to root, with the kubelet's modes: the root
dir, the pods dir and each pod's dir 0750, the state store 0600 (it holds whole manifests, env
values included). Containers reach what they need through bind mounts, which do not depend on
the modes of the directories above them."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o750
PRIVATE_FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Make path and whichever of its parents are missing, each 0750 (whatever the umask);
    directories already there keep their modes."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, PRIVATE_DIR_MODE)
        except FileExistsError:  # made by another service meanwhile
            continue
        os.chmod(d, PRIVATE_DIR_MODE)
    return path


def private_files(*paths: Path) -> None:
    """0600 for those of these files that exist."""
    for p in paths:
        try:
            os.chmod(p, PRIVATE_FILE_MODE, follow_symlinks=False)
        except FileNotFoundError:
            pass
