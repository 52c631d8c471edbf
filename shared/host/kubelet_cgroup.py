"""kubeletCgroups: the cgroup the node agent's processes run in, as the kubelet moves its own
process there (and back every minute, should something move it). Made when missing: on cgroup v2
with its ancestors delegating cpu, memory and pids to it; on v1 in the cpu, cpuacct, memory and
pids hierarchies, where a process's usage is accounted.

Under `pykubelet up` the supervisor moves itself and the bus there before it starts the services
(containerd, started before, stays where it was: the runtime's own cgroup), and each service moves
itself, as the kubelet does. The systemd units cannot: their sandbox (ProtectControlGroups) keeps
/sys/fs/cgroup read-only, and systemd places a unit by its Slice=; the move then fails with what
to do instead."""

from __future__ import annotations

import os
from pathlib import Path

from shared.host.agent_cgroup import process_cgroup
from shared.host.cgroup_dirs import make_dirs

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_HIERARCHIES = ("cpu", "cpuacct", "memory", "pids")
V2_CONTROLLERS = "+cpu +memory +pids"


class KubeletCgroupError(RuntimeError):
    """A process could not be moved into kubeletCgroups; the message says why and what to do."""


def cgroup_version(root: Path = CGROUP_ROOT) -> int:
    return 2 if (root / "cgroup.controllers").is_file() else 1


def current(pid: int, version: int, proc: Path = Path("/proc")) -> str | None:
    try:
        return process_cgroup((proc / str(pid) / "cgroup").read_text(), version)
    except OSError:
        return None


def _dirs(cgroup: str, version: int, root: Path) -> list[Path]:
    rel = cgroup.strip("/")
    if version == 2:
        return [root / rel]
    return [root / h / rel for h in V1_HIERARCHIES if (root / h).is_dir()]


def _make(cgroup: str, version: int, root: Path) -> None:
    # kubeletCgroups may name a cgroup of the admin's: an existing one keeps its mode
    if version == 2:
        make_dirs(root, cgroup, before_each=lambda d: (d / "cgroup.subtree_control").write_text(V2_CONTROLLERS),
                  own=False)
        return
    for h in V1_HIERARCHIES:
        if (root / h).is_dir():
            make_dirs(root / h, cgroup, own=False)


def move(pid: int, cgroup: str, what: str, root: Path = CGROUP_ROOT, proc: Path = Path("/proc")) -> str | None:
    """Put process `pid` (`what`, for the message) into `cgroup` unless it is there: the cgroup it
    came from when it moved, else None."""
    version = cgroup_version(root)
    before = current(pid, version, proc)
    if before == cgroup:
        return None
    try:
        _make(cgroup, version, root)
        for d in _dirs(cgroup, version, root):
            (d / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        hint = (" /sys/fs/cgroup is read-only here (a systemd unit's sandbox, or a container): under systemd, "
                "pykubelet's services are units of pykubelet.slice, placed by their Slice= (a drop-in); "
                "leave kubeletCgroups unset there"
                if exc.errno in (30, 13, 1) else "")  # EROFS, EACCES, EPERM
        raise KubeletCgroupError(f"kubeletCgroups {cgroup}: cannot move {what} (pid {pid}, in {before}) there: "
                                 f"{exc.strerror or exc}.{hint}") from None
    return before or "?"


def move_self(cgroup: str, what: str, root: Path = CGROUP_ROOT) -> str | None:
    return move(os.getpid(), cgroup, what, root)
