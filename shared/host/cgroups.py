"""CPU and memory figures of one cgroup, read the way cAdvisor reads them for the kubelet.

cgroup v1 (one hierarchy per controller: cpuacct/, memory/, pids/) and v2 (one unified tree)
are told apart by the unified tree's cgroup.controllers file. Cgroup names are absolute in the
hierarchy ("/" is the root, "/kubepods/burstable/pod<uid>" a pod); a reader takes the mount
root as an argument so tests can point it at files in a temp dir.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from shared.host.facts import parse_meminfo
from shared.model.cgroup_names import DRIVERS, KUBEPODS, SYSTEMD, on_host

# The kubelet treats a limit at or above this as "no limit" (the kernel rounds 2^63-1 down).
UNLIMITED = 1 << 62
# The node's layout below /kubepods (or cgroupRoot's), as pod-sync creates it
# (services/pod_sync/resources.py), in cgroupfs names; with the systemd driver the same cgroups
# are slices (shared/model/cgroup_names.py).
QOS_TIERS = ("", "/burstable", "/besteffort")
# /proc/stat counts in USER_HZ ticks, 100 on every Linux ABI Python runs on.
USER_HZ = 100
_SAFE_NAME = re.compile(r"^(/[A-Za-z0-9_.:@-]+)*/?$")
_SAFE_UID = re.compile(r"^[A-Za-z0-9-]{1,64}$")


@dataclass(frozen=True)
class CgroupSample:
    """One read of a cgroup; None where the file was missing or unreadable."""

    time: float  # wall clock, seconds since the epoch
    cpu_usage_ns: int | None
    memory_usage: int | None
    working_set: int | None
    rss: int | None
    page_faults: int | None
    major_page_faults: int | None
    memory_limit: int | None  # None: unlimited


# The memory fields of a CgroupSample, in its order: usage, working set, rss, page faults,
# major page faults, limit.
MemoryFigures = tuple[int | None, int | None, int | None, int | None, int | None, int | None]


# Pressure stall information (cgroup v2): the resources with a <resource>.pressure file.
PSI_RESOURCES = ("cpu", "memory", "io")
_PSI_KEYS = ("avg10", "avg60", "avg300", "total")


def parse_psi(text: str) -> dict[str, dict[str, float | int]] | None:
    """A pressure file ("some avg10=0.12 avg60=0.00 avg300=0.00 total=12345" and a "full" line)
    in the Summary API's PSIStats shape; a missing "full" line (cpu before Linux 5.13) counts as
    zeros, as cAdvisor reads it. total is the kernel's microseconds, as the kubelet passes it on.
    None when there is no "some" line or a value is not a number."""
    out: dict[str, dict[str, float | int]] = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        if kind not in ("some", "full"):
            continue
        try:
            values = dict(f.split("=", 1) for f in fields)
            out[kind] = {"total": int(values["total"]), **{k: float(values[k]) for k in _PSI_KEYS[:3]}}
        except (KeyError, ValueError):
            return None
    if "some" not in out:
        return None
    out.setdefault("full", {"total": 0, "avg10": 0.0, "avg60": 0.0, "avg300": 0.0})
    return out


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_keyed(path: Path) -> dict[str, int]:
    """"key value" lines (memory.stat, cpu.stat, /proc/vmstat)."""
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def _read_key(path: Path, key: str) -> int | None:
    """One key of a "key value" file, without parsing the rest (a v1 memory.stat has about 40
    lines, read for every pod and container in a stats pass)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    text = "\n" + text
    at = text.find(f"\n{key} ")
    if at < 0:
        return None
    try:
        return int(text[at + len(key) + 2:].split("\n", 1)[0])
    except ValueError:
        return None


def read_meminfo(path: Path) -> dict[str, int]:
    """/proc/meminfo in bytes; empty when it cannot be read (stats report what they can)."""
    try:
        return parse_meminfo(path.read_text())
    except OSError:
        return {}


class CgroupReader:
    def __init__(self, root: str | Path = "/sys/fs/cgroup", proc: str | Path = "/proc",
                 kubepods: str = KUBEPODS) -> None:
        self.root = Path(root)
        self.proc = Path(proc)
        self.pods_cgroup = kubepods  # cgroupfs name: /kubepods, or below cgroupRoot
        self.version = 2 if (self.root / "cgroup.controllers").is_file() else 1

    def _dir(self, controller: str, cgroup: str) -> Path:
        if not _SAFE_NAME.fullmatch(cgroup) or ".." in cgroup.split("/"):
            raise ValueError(f"not a cgroup name: {cgroup!r}")
        rel = cgroup.strip("/")
        base = self.root if self.version == 2 else self.root / controller
        return base / rel if rel else base

    def path(self, controller: str, cgroup: str) -> Path:
        """The cgroup's directory for a controller (v2: the one unified directory); ValueError
        for a name that is not a cgroup's."""
        return self._dir(controller, cgroup)

    def exists(self, cgroup: str) -> bool:
        return self._dir("cpuacct", cgroup).is_dir()

    def created(self, cgroup: str) -> float | None:
        """When the cgroup was made (its directory's ctime), as cAdvisor's creation time."""
        try:
            return self._dir("cpuacct", cgroup).stat().st_ctime
        except OSError:
            return None

    def kubepods(self) -> str:
        """The pods' cgroup as it is on this host: /kubepods, or kubepods.slice (systemd driver)."""
        systemd = on_host(self.pods_cgroup, SYSTEMD)
        return systemd if not self.exists(self.pods_cgroup) and self.exists(systemd) else self.pods_cgroup

    def pod_cgroup(self, pod_uid: str) -> str | None:
        """The pod's cgroup under the pods' cgroup, whichever QoS tier it is in and whichever
        driver made it."""
        if not _SAFE_UID.match(pod_uid):
            return None
        for tier in QOS_TIERS:
            for driver in DRIVERS:
                name = on_host(f"{self.pods_cgroup}{tier}/pod{pod_uid}", driver)
                if self.exists(name):
                    return name
        return None

    def sample(self, cgroup: str = "/") -> CgroupSample:
        now = time.time()
        cpu = self._cpu_v2(cgroup) if self.version == 2 else read_int(self._dir("cpuacct", cgroup) / "cpuacct.usage")
        mem = self._memory_v2(cgroup) if self.version == 2 else self._memory_v1(cgroup)
        return CgroupSample(now, cpu, *mem)

    def working_set(self, cgroup: str = "/") -> int | None:
        """Only the working set: two reads, cheap enough to poll every half second."""
        d = self._dir("memory", cgroup)
        if self.version == 2:
            if cgroup.strip("/") == "":
                return self._proc_memory()[1]
            return _working_set(read_int(d / "memory.current"), read_keyed(d / "memory.stat").get("inactive_file"))
        stat = read_keyed(d / "memory.stat")
        return _working_set(read_int(d / "memory.usage_in_bytes"),
                            stat.get("total_inactive_file", stat.get("inactive_file")))

    def psi(self, cgroup: str = "/") -> dict[str, dict[str, dict[str, float | int]]]:
        """{resource: PSIStats} from the cgroup's pressure files, as the kubelet 1.37 reports them
        (its KubeletPSI feature); {} on cgroup v1, or where the kernel keeps no pressure figures.
        The root reads /proc/pressure where the root cgroup has no files of its own."""
        if self.version != 2:
            return {}
        out = {}
        for resource in PSI_RESOURCES:
            try:
                path = self._dir(resource, cgroup) / f"{resource}.pressure"
            except ValueError:  # not a cgroup name (a runtime's odd container ID): nothing to read
                return {}
            if cgroup.strip("/") == "" and not path.is_file():
                path = self.proc / "pressure" / resource
            try:
                stats = parse_psi(path.read_text())
            except OSError:
                continue
            if stats is not None:
                out[resource] = stats
        return out

    def swap(self, cgroup: str = "/") -> tuple[int, int | None] | None:
        """(swap in use, swap limit or None for none) in bytes, as cAdvisor reads them for the
        kubelet's SwapStats: v2 memory.swap.current and memory.swap.max; v1 memory.stat's
        total_swap and memory.memsw.limit_in_bytes (memory and swap together, as cAdvisor takes
        it). The root: the node's swap from /proc/meminfo (SwapTotal - SwapFree, of SwapTotal).
        None where the kernel keeps no swap figures for the cgroup."""
        if cgroup.strip("/") == "":
            info = read_meminfo(self.proc / "meminfo")
            if "SwapTotal" not in info:
                return None
            return info["SwapTotal"] - info.get("SwapFree", 0), info["SwapTotal"]
        try:
            d = self._dir("memory", cgroup)
        except ValueError:
            return None
        if self.version == 2:
            used, limit = read_int(d / "memory.swap.current"), read_int(d / "memory.swap.max")
        else:
            used, limit = _read_key(d / "memory.stat", "total_swap"), read_int(d / "memory.memsw.limit_in_bytes")
        if used is None:
            return None
        return used, limit if limit is not None and limit < UNLIMITED else None  # v2's "max" reads as None

    def memory_limit(self, cgroup: str) -> int | None:
        """The cgroup's memory limit in bytes; None for none, or when it cannot be read."""
        try:
            d = self._dir("memory", cgroup)
        except ValueError:
            return None
        raw = read_int(d / "memory.limit_in_bytes") if self.version == 1 else read_int(d / "memory.max")
        return raw if raw is not None and raw < UNLIMITED else None  # v2's "max" reads as None

    def process_count(self, cgroup: str) -> int | None:
        return read_int(self._dir("pids", cgroup) / "pids.current")

    # -- v1 ------------------------------------------------------------------------------------

    def _memory_v1(self, cgroup: str) -> MemoryFigures:
        d = self._dir("memory", cgroup)
        usage = read_int(d / "memory.usage_in_bytes")
        stat = read_keyed(d / "memory.stat")
        limit = read_int(d / "memory.limit_in_bytes")
        # Hierarchical figures (total_*) cover child cgroups, which is what the kubelet wants
        # for the root and for a pod; page faults are the cgroup's own, as cAdvisor reports them.
        inactive = stat.get("total_inactive_file", stat.get("inactive_file"))
        rss = stat.get("total_rss", stat.get("rss"))
        return (usage, _working_set(usage, inactive), rss, stat.get("pgfault"), stat.get("pgmajfault"),
                limit if limit is not None and limit < UNLIMITED else None)

    # -- v2 ------------------------------------------------------------------------------------

    def _cpu_v2(self, cgroup: str) -> int | None:
        stat = read_keyed(self._dir("cpu", cgroup) / "cpu.stat")
        if "usage_usec" in stat:
            return stat["usage_usec"] * 1000
        if cgroup.strip("/") == "":
            return self._proc_cpu_ns()
        return None

    def _memory_v2(self, cgroup: str) -> MemoryFigures:
        d = self._dir("memory", cgroup)
        usage = read_int(d / "memory.current")
        if usage is None and cgroup.strip("/") == "":
            return self._proc_memory()  # the v2 root has no memory.current
        stat = read_keyed(d / "memory.stat")
        try:
            raw_max = (d / "memory.max").read_text().strip()
            limit = None if raw_max == "max" else int(raw_max)
        except (OSError, ValueError):
            limit = None
        return (usage, _working_set(usage, stat.get("inactive_file")), stat.get("anon"), stat.get("pgfault"),
                stat.get("pgmajfault"), limit if limit is not None and limit < UNLIMITED else None)

    def _proc_cpu_ns(self) -> int | None:
        try:
            fields = (self.proc / "stat").read_text().splitlines()[0].split()
        except (OSError, IndexError):
            return None
        if not fields or fields[0] != "cpu":
            return None
        # user nice system idle iowait irq softirq steal: busy time is all but idle and iowait
        ticks = [int(v) for v in fields[1:9]]
        busy = sum(ticks) - ticks[3] - ticks[4]
        return busy * (1_000_000_000 // USER_HZ)

    def _proc_memory(self) -> MemoryFigures:
        info = read_meminfo(self.proc / "meminfo")
        vm = read_keyed(self.proc / "vmstat")
        if "MemTotal" not in info:
            return (None,) * 6
        usage = info["MemTotal"] - info.get("MemFree", 0)
        rss = info.get("Active(anon)", 0) + info.get("Inactive(anon)", 0)
        return (usage, _working_set(usage, info.get("Inactive(file)")), rss, vm.get("pgfault"),
                vm.get("pgmajfault"), None)


def _working_set(usage: int | None, inactive_file: int | None) -> int | None:
    """usage minus inactive page cache, never below zero (cAdvisor's working set)."""
    if usage is None:
        return None
    return max(0, usage - (inactive_file or 0))
