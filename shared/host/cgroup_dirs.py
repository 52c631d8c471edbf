"""Making the cgroups pykubelet owns (/kubepods, its QoS tiers, pod cgroups, kubeletCgroups,
the reserved cgroups) with the mode the kubelet's have: 0755, as libcontainer makes them.

Every service runs with umask 077 so that the files it makes are private from the start
(shared/host/node_dirs.py). A cgroup made under that umask is 0700, and then no reader that is
not root can walk into it: a monitoring agent running as a user with /sys/fs/cgroup mounted, or
a pod that reads its own pod cgroup's limits (the upstream resize specs do). A cgroup's files
tell limits and usage, which the kubelet's cgroups show to every user, and the kernel decides
who may write them by their own modes (0644 for root), not the directory's.

Below /kubepods every cgroup is pykubelet's, so one an older pykubelet made 0700 gets the mode
when it is next made here (own=True); elsewhere an existing directory keeps its mode.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

CGROUP_DIR_MODE = 0o755


def make_dir(d: Path, own: bool = True) -> None:
    """One cgroup directory, made 0755 whatever the umask. own: an existing one is pykubelet's
    and gets that mode too."""
    try:
        os.mkdir(d, CGROUP_DIR_MODE)
    except FileExistsError:
        if not own:
            return
    # mkdir's mode passes through the umask: set it again
    if stat.S_IMODE(os.stat(d).st_mode) != CGROUP_DIR_MODE:
        os.chmod(d, CGROUP_DIR_MODE)


def make_dirs(base: Path, rel: str, before_each: Callable[[Path], object] | None = None, own: bool = True) -> Path:
    """The cgroup `rel` below `base` (a hierarchy's root, which exists), each level made by
    make_dir; before_each(parent) runs before each level (cgroup v2: delegate the controllers
    down). Returns the cgroup's directory."""
    d = base
    for part in rel.strip("/").split("/"):
        if not part:
            continue
        if before_each is not None:
            before_each(d)
        d = d / part
        make_dir(d, own)
    return d
