"""The node's eviction signals, measured as the kubelet measures them.

- memory.available: memory capacity minus the working set of the root cgroup (usage minus
  inactive page cache), so active page cache counts as used, as it does for the kubelet.
- allocatableMemory.available: allocatable memory minus the working set of /kubepods.
- nodefs.*: the filesystem of the root dir (pods, logs, emptyDirs); imagefs.*: the filesystem
  the runtime keeps images on (CRI ImageFsInfo), often the same one.
- pid.available: the lesser of kernel.pid_max and kernel.threads-max, minus the threads the
  kernel has now.

Reading memory costs two small cgroup files, cheap enough to poll every half second near a
threshold; the rest is read once per housekeeping cycle.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from shared.config.thresholds import MEMORY_SIGNALS
from shared.host.cgroups import CgroupReader
from shared.host.facts import memory_capacity_bytes, task_max

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Observed:
    available: int
    capacity: int


Observations = dict[str, Observed]


class SignalReader:
    def __init__(self, nodefs: Path, allocatable_memory: int, cgroups: CgroupReader | None = None,
                 proc: Path = Path("/proc")) -> None:
        self.nodefs = nodefs
        self.allocatable_memory = allocatable_memory
        self.cgroups = cgroups or CgroupReader()
        self.proc = proc
        self.memory_capacity = memory_capacity_bytes(str(proc / "meminfo"))
        self.imagefs: Path | None = None  # set from CRI ImageFsInfo by the manager

    def memory(self, signals: frozenset[str] = MEMORY_SIGNALS) -> Observations:
        out: Observations = {}
        if "memory.available" in signals:
            root = self.cgroups.working_set("/")
            if root is not None:
                out["memory.available"] = Observed(max(0, self.memory_capacity - root), self.memory_capacity)
        if "allocatableMemory.available" in signals:
            kubepods = self.cgroups.kubepods()
            pods = self.cgroups.working_set(kubepods) if self.cgroups.exists(kubepods) else 0
            if pods is not None:
                out["allocatableMemory.available"] = Observed(max(0, self.allocatable_memory - pods),
                                                              self.allocatable_memory)
        return out

    def filesystems(self) -> Observations:
        out: Observations = {}
        for prefix, path in (("nodefs", self.nodefs), ("imagefs", self.imagefs or self.nodefs)):
            try:
                st = os.statvfs(path)
            except OSError as exc:
                log.warning("cannot measure %s at %s: %s", prefix, path, exc)
                continue
            out[f"{prefix}.available"] = Observed(st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)
            if st.f_files:  # some filesystems have no inode limit
                out[f"{prefix}.inodesFree"] = Observed(st.f_favail, st.f_files)
        return out

    def pids(self) -> Observations:
        pid_max = task_max(self.proc)
        try:
            # /proc/loadavg's fourth field is running/total scheduling entities (threads).
            threads = int((self.proc / "loadavg").read_text().split()[3].split("/")[1])
        except (OSError, ValueError, IndexError) as exc:
            log.warning("cannot measure pid.available: %s", exc)
            return {}
        if pid_max is None:
            log.warning("cannot measure pid.available: neither %s/sys/kernel/pid_max nor threads-max reads", self.proc)
            return {}
        return {"pid.available": Observed(max(0, pid_max - threads), pid_max)}

    def all(self) -> Observations:
        return {**self.memory(), **self.filesystems(), **self.pids()}
