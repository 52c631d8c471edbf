"""The processes of a cgroup as cAdvisor counts them for the kubelet's /metrics/cadvisor
(container_processes, container_threads, container_threads_max, container_file_descriptors,
container_sockets).

cAdvisor's rules: the processes are the lines of cgroup.procs in the cpu controller's directory
(the unified one on v2), which is not recursive, so a pod's or a QoS tier's cgroup usually has
none of its own; threads and their limit are the pids controller's pids.current and pids.max
("max" is 0), which count the whole subtree; on v2 without pids.current, the processes stand in
for the threads and the limit is 0; v1's root has no pids figures (0). Descriptors and sockets
are the entries of /proc/<pid>/fd of those processes, sockets being the links to "socket:[...]".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from shared.host.cgroups import CgroupReader, read_int

# The descriptors of at most this many processes are counted in one cgroup: a fork bomb's cgroup
# must not make a scrape walk a million /proc entries.
MAX_PROCESSES_WALKED = 4096


@dataclass(frozen=True)
class CgroupProcesses:
    processes: int
    threads: int
    threads_max: int
    file_descriptors: int
    sockets: int
    # The soft "Max open files" of the cgroup's first process (its lowest PID: a container's init),
    # -1 for unlimited, None when there is no process or no figure (container_ulimits_soft).
    open_files_soft: int | None = None


def _pids(procs: Path) -> list[int]:
    try:
        text = procs.read_text()
    except OSError:
        return []
    return [int(line) for line in text.split() if line.isdigit()]


def _descriptors(proc: Path, pid: int) -> tuple[int, int]:
    """(open descriptors, sockets) of one process; (0, 0) when it is gone."""
    fd_dir = proc / str(pid) / "fd"
    fds = sockets = 0
    try:
        with os.scandir(fd_dir) as entries:
            for entry in entries:
                fds += 1
                try:
                    if os.readlink(entry.path).startswith("socket:"):
                        sockets += 1
                except OSError:  # closed meanwhile
                    pass
    except OSError:
        return 0, 0
    return fds, sockets


def open_files_soft_limit(proc: Path, pid: int) -> int | None:
    """The soft "Max open files" in /proc/<pid>/limits, as cAdvisor reads it (-1: unlimited)."""
    try:
        text = (proc / str(pid) / "limits").read_text()[:8192]
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Max open files"):
            fields = line.removeprefix("Max open files").split()
            if len(fields) != 3:
                return None
            soft = fields[0]
            if soft == "unlimited":
                return -1
            return int(soft) if soft.isdigit() else None
    return None


def read_processes(reader: CgroupReader, cgroup: str) -> CgroupProcesses | None:
    """None for a name that is not a cgroup's or a cgroup that is gone."""
    try:
        cpu, pids_dir = reader.path("cpu", cgroup), reader.path("pids", cgroup)
    except ValueError:
        return None
    if not cpu.is_dir():
        return None
    pids = _pids(cpu / "cgroup.procs")
    root = cgroup.strip("/") == ""
    if reader.version == 1 and root:
        threads, threads_max = 0, 0
    else:
        current = read_int(pids_dir / "pids.current")
        threads = current if current is not None else len(pids)
        threads_max = (read_int(pids_dir / "pids.max") or 0) if current is not None else 0  # "max" reads as None
    fds = sockets = 0
    for pid in pids[:MAX_PROCESSES_WALKED]:
        f, s = _descriptors(reader.proc, pid)
        fds, sockets = fds + f, sockets + s
    return CgroupProcesses(processes=len(pids), threads=threads, threads_max=threads_max,
                           file_descriptors=fds, sockets=sockets,
                           open_files_soft=open_files_soft_limit(reader.proc, min(pids)) if pids else None)
