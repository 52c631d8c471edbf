"""Node facts from /proc and statvfs that the stats endpoints report: filesystems, network
interfaces, process limits. Small synchronous reads; nothing here walks a large tree."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from shared.host.facts import task_max
from shared.host.mounts import unescape_mountinfo

# cAdvisor leaves these out of the node's interfaces (a pod's host-side veth is the pod's).
IGNORED_INTERFACE_PREFIXES = ("lo", "veth", "docker")


@dataclass(frozen=True)
class FsInfo:
    time: float
    capacity: int
    available: int
    used: int
    inodes: int
    inodes_free: int

    @property
    def inodes_used(self) -> int:
        return self.inodes - self.inodes_free


def statfs(path: str | Path) -> FsInfo | None:
    """The filesystem holding path; None if it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return FsInfo(time=time.time(), capacity=st.f_blocks * st.f_frsize, available=st.f_bavail * st.f_frsize,
                  used=(st.f_blocks - st.f_bfree) * st.f_frsize, inodes=st.f_files, inodes_free=st.f_ffree)


def statfs_nearest(path: str | Path) -> FsInfo | None:
    """statfs of path, or of its nearest existing parent (a log dir not made yet)."""
    p = Path(path)
    for candidate in (p, *p.parents):
        if candidate.exists():
            return statfs(candidate)
    return None


@dataclass(frozen=True)
class InterfaceCounters:
    name: str
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    rx_dropped: int = 0
    tx_dropped: int = 0


def read_net_dev(path: str | Path = "/proc/net/dev") -> list[InterfaceCounters]:
    out: list[InterfaceCounters] = []
    try:
        lines = Path(path).read_text().splitlines()[2:]
    except OSError:
        return out
    for line in lines:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 12:
            continue
        try:
            v = [int(f) for f in fields]
        except ValueError:
            continue
        out.append(InterfaceCounters(name.strip(), rx_bytes=v[0], rx_packets=v[1], rx_errors=v[2], rx_dropped=v[3],
                                     tx_bytes=v[8], tx_packets=v[9], tx_errors=v[10], tx_dropped=v[11]))
    return out


def node_interfaces(path: str | Path = "/proc/net/dev") -> list[InterfaceCounters]:
    return [i for i in read_net_dev(path) if not i.name.startswith(IGNORED_INTERFACE_PREFIXES)]


def cgroup_interfaces(proc: Path, procs: Path) -> list[InterfaceCounters]:
    """The interfaces of the network namespace the first process of a cgroup is in (its
    cgroup.procs file), as cAdvisor reads a pod sandbox's: /proc/<pid>/net/dev."""
    try:
        first = procs.read_text().split()[:1]
    except OSError:
        return []
    if not first or not first[0].isdigit():
        return []
    return node_interfaces(proc / first[0] / "net/dev")


def rlimit(proc: str | Path = "/proc") -> dict[str, int]:
    """The kubelet's RlimitStats: the most tasks the kernel allows (the lesser of pid_max and
    threads-max) and the number of tasks (sysinfo's procs, which is the second number of the
    fourth field of /proc/loadavg)."""
    out: dict[str, int] = {}
    most = task_max(Path(proc))
    if most is not None:
        out["maxpid"] = most
    try:
        out["curproc"] = int((Path(proc) / "loadavg").read_text().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


@dataclass(frozen=True)
class Mount:
    major: int
    minor: int
    mount_point: str
    fs_type: str
    source: str


def read_mounts(path: str | Path = "/proc/self/mountinfo") -> list[Mount]:
    out: list[Mount] = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, sep, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if not sep or len(f) < 5 or len(r) < 2:
            continue
        try:
            major, minor = (int(x) for x in f[2].split(":"))
        except ValueError:
            continue
        out.append(Mount(major, minor, unescape_mountinfo(f[4]), r[0], unescape_mountinfo(r[1])))
    return out


# Devices cAdvisor leaves out of its disk map.
_NOT_DISKS = ("loop", "ram", "sr")


def block_device_names(sys_block: Path, mounts: list[Mount]) -> dict[tuple[int, int], str]:
    """major:minor -> the name cAdvisor gives a device in its I/O series: /dev/<disk> for a disk
    in /sys/block (loop, ram and sr devices left out), else the source of a filesystem mounted
    from it."""
    names = {(m.major, m.minor): m.source for m in mounts if m.source.startswith("/dev/")}
    try:
        disks = sorted(sys_block.iterdir())
    except OSError:
        disks = []
    for disk in disks:
        if disk.name.startswith(_NOT_DISKS):
            continue
        try:
            major, _, minor = (disk / "dev").read_text().strip().partition(":")
            names[(int(major), int(minor))] = f"/dev/{disk.name}"  # a disk's own name wins
        except (OSError, ValueError):
            continue
    return names


def device_of(path: str | Path, mounts: list[Mount]) -> str:
    """The source device of the filesystem holding path ("/dev/vda1"), as cAdvisor labels
    filesystems; the mount's major:minor when the source is not a device."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return ""
    major, minor = os.major(dev), os.minor(dev)
    for m in mounts:
        if (m.major, m.minor) == (major, minor):
            return m.source if m.source.startswith("/dev/") else f"{major}:{minor}"
    return f"{major}:{minor}"
