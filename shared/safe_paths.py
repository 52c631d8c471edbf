"""Paths under the node's root dir built only from names that cannot lead out of it.

Pod UIDs, container and volume names, CSI driver names become directory names under
<root>/pods and <root>/plugins, where root creates and removes files. Each name must be one
plain path component, and the directories it is joined under must resolve beneath the root (a
symlink planted on the way out is refused), so no input can make a create or a remove land
elsewhere on the host.
"""

from __future__ import annotations

import os
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
