"""The kubelet's /spec: cAdvisor's MachineInfo (info/v1 machine.go) as JSON, from /proc and /sys.

cAdvisor gathers it at start and refreshes it every few minutes; MachineSpec does the same.
"""

from __future__ import annotations

import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from services.node_api.hostfs import IGNORED_INTERFACE_PREFIXES, read_mounts
from shared.host.cgroups import read_meminfo
from shared.host.facts import boot_id, machine_id, system_uuid

REFRESH_SECONDS = 300.0
_VENDOR = re.compile(r"^vendor_id\s*:\s*(.*)$", re.MULTILINE)
_CPU_MHZ = re.compile(r"^(?:cpu MHz|CPU MHz|clock)\s*:\s*([0-9]+\.[0-9]+)", re.MULTILINE)
_CPU_DIR = re.compile(r"^cpu[0-9]+$")
# cAdvisor's FsType names: everything that is not zfs/devicemapper/btrfs is "vfs"
_FS_TYPES = {"zfs": "zfs", "btrfs": "btrfs"}
_SIZE_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}


def rfc3339nano(ts: float) -> str:
    """Go's time.Time JSON form."""
    dt = datetime.fromtimestamp(ts, timezone.utc)
    frac = f"{dt.microsecond:06d}".rstrip("0")
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _int(path: Path, default: int = 0) -> int:
    try:
        return int(_read(path))
    except ValueError:
        return default


class MachineFacts:
    """Reads the host; paths are arguments so tests can use a fake /sys and /proc."""

    def __init__(self, sys: str | Path = "/sys", proc: str | Path = "/proc") -> None:
        self.sys = Path(sys)
        self.proc = Path(proc)

    def cpuinfo(self) -> str:
        return _read(self.proc / "cpuinfo")

    def cpu_frequency_khz(self, cpuinfo: str) -> int:
        max_freq = self.sys / "devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"
        if max_freq.exists():
            return _int(max_freq)
        m = _CPU_MHZ.search(cpuinfo)
        return int(float(m.group(1)) * 1000) if m else 0

    def topology(self, memory: int) -> tuple[list[dict[str, Any]], int, int, int]:
        """(nodes, logical cores, physical cores, sockets), one NUMA node holding every core."""
        base = self.sys / "devices/system/cpu"
        cores: dict[tuple[int, int], dict[str, Any]] = {}
        threads = 0
        try:
            cpu_dirs = sorted((d for d in base.iterdir() if _CPU_DIR.match(d.name)), key=lambda d: int(d.name[3:]))
        except OSError:
            cpu_dirs = []
        node_caches: dict[tuple[int, str, int], dict[str, Any]] = {}
        for d in cpu_dirs:
            if (d / "online").exists() and _read(d / "online") == "0":
                continue
            if not (d / "topology").is_dir():
                continue
            cpu_id = int(d.name[3:])
            socket = _int(d / "topology/physical_package_id")
            core_id = _int(d / "topology/core_id")
            threads += 1
            core = cores.setdefault((socket, core_id), {"core_id": core_id, "thread_ids": [], "caches": [],
                                                         "socket_id": socket})
            core["thread_ids"].append(cpu_id)
            if len(core["thread_ids"]) == 1:
                for cache in self._caches(d):
                    if cache["level"] <= 2:
                        core["caches"].append(cache)
                    else:
                        node_caches.setdefault((cache["level"], cache["type"], socket), cache)
        if not threads:
            threads = os.cpu_count() or 1
        node = {"node_id": 0, "memory": memory, "hugepages": self.hugepages(),
                "cores": sorted(cores.values(), key=lambda c: (c["socket_id"], c["core_id"])),
                "caches": list(node_caches.values())}
        sockets = len({s for s, _ in cores}) or 1
        return [node], threads, len(cores) or threads, sockets

    def _caches(self, cpu_dir: Path) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        try:
            indexes = sorted(p for p in (cpu_dir / "cache").iterdir() if p.name.startswith("index"))
        except OSError:
            return out
        for idx in indexes:
            raw = _read(idx / "size")
            if not raw:
                continue
            unit = _SIZE_UNITS.get(raw[-1], 1)
            try:
                size = int(raw.rstrip("KMG")) * unit
            except ValueError:
                continue
            out.append({"size": size, "type": _read(idx / "type"), "level": _int(idx / "level")})
        return out

    def hugepages(self) -> list[dict[str, int]]:
        out: list[dict[str, int]] = []
        try:
            dirs = sorted((self.sys / "kernel/mm/hugepages").iterdir())
        except OSError:
            return out
        for d in dirs:
            m = re.match(r"hugepages-(\d+)kB$", d.name)
            if m:
                out.append({"page_size": int(m.group(1)), "num_pages": _int(d / "nr_hugepages")})
        return out

    def network_devices(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        try:
            names = sorted(p.name for p in (self.sys / "class/net").iterdir())
        except OSError:
            return out
        for name in names:
            if name.startswith(IGNORED_INTERFACE_PREFIXES):
                continue
            d = self.sys / "class/net" / name
            speed = _int(d / "speed", 0)  # unset (or -1, or unreadable) on virtual devices
            out.append({"name": name, "mac_address": _read(d / "address"), "speed": max(speed, 0),
                        "mtu": _int(d / "mtu")})
        return out

    def disk_map(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        try:
            names = sorted(p.name for p in (self.sys / "block").iterdir())
        except OSError:
            return out
        for name in names:
            if name.startswith(("loop", "ram", "sr")):
                continue
            d = self.sys / "block" / name
            try:
                major, minor = (int(x) for x in _read(d / "dev").split(":"))
            except ValueError:
                continue
            sched = re.search(r"\[(.*)\]", _read(d / "queue/scheduler"))
            out[f"{major}:{minor}"] = {"name": name, "major": major, "minor": minor,
                                       "size": _int(d / "size") * 512,
                                       "scheduler": sched.group(1) if sched else "none"}
        return out

    def filesystems(self) -> list[dict[str, Any]]:
        """Block-device filesystems, one entry per device (as cAdvisor's global fs info)."""
        out, seen = [], set()
        for m in read_mounts(self.proc / "self/mountinfo"):
            if not m.source.startswith("/dev/") or m.source in seen:
                continue
            try:
                st = os.statvfs(m.mount_point)
            except OSError:
                continue
            seen.add(m.source)
            out.append({"device": m.source, "capacity": st.f_blocks * st.f_frsize,
                        "type": _FS_TYPES.get(m.fs_type, "vfs"), "inodes": st.f_files,
                        "has_inodes": st.f_files > 0})
        return out

    def s390x_count(self, attribute: str) -> int:
        """cAdvisor's CPU books and drawers: distinct topology/<attribute> values of the CPUs on
        s390x, the one architecture that has them; 0 elsewhere."""
        if os.uname().machine != "s390x":
            return 0
        return len({_read(f).strip() for f in (self.sys / "bus/cpu/devices").glob(f"cpu*/topology/{attribute}")})

    def machine_info(self, now: float | None = None) -> dict[str, Any]:
        cpuinfo = self.cpuinfo()
        meminfo = read_meminfo(self.proc / "meminfo")
        memory = meminfo.get("MemTotal", 0)
        topology, cores, physical, sockets = self.topology(memory)
        vendor = _VENDOR.search(cpuinfo)
        # Key order follows cAdvisor's struct, as its JSON encoder writes it (books and drawers
        # are omitted when 0, as its omitempty does).
        books, drawers = self.s390x_count("book_id"), self.s390x_count("drawer_id")
        return {
            "timestamp": rfc3339nano(time.time() if now is None else now),
            "vendor_id": vendor.group(1).strip() if vendor else "",
            "num_cores": cores,
            "num_physical_cores": physical,
            "num_sockets": sockets,
            **({"num_books": books} if books else {}),
            **({"num_drawers": drawers} if drawers else {}),
            "cpu_frequency_khz": self.cpu_frequency_khz(cpuinfo),
            "memory_capacity": memory,
            "swap_capacity": meminfo.get("SwapTotal", 0),
            "memory_by_type": {},
            # "app direct_mode_capacity" (sic) is cAdvisor's own JSON key
            "nvm": {"memory_mode_capacity": 0, "app direct_mode_capacity": 0, "avg_power_budget": 0},
            "hugepages": self.hugepages(),
            "machine_id": machine_id(),
            "system_uuid": system_uuid(),
            "boot_id": boot_id(),
            "filesystems": self.filesystems(),
            "disk_map": self.disk_map(),
            "network_devices": self.network_devices(),
            "topology": topology,
            "cloud_provider": "Unknown",
            "instance_type": "Unknown",
            "instance_id": "None",
        }


class MachineSpec:
    """MachineInfo, gathered once and refreshed every REFRESH_SECONDS."""

    def __init__(self, facts: MachineFacts | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.facts = facts or MachineFacts()
        self._clock = clock
        self._info: dict[str, Any] | None = None
        self._at = 0.0
        self.timestamp = 0.0  # wall clock of the current info

    def get(self) -> dict[str, Any]:
        if self._info is None or self._clock() - self._at > REFRESH_SECONDS:
            self.timestamp = time.time()
            self._info = self.facts.machine_info(self.timestamp)
            self._at = self._clock()
        return self._info
