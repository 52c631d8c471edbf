"""/proc/diskstats as cAdvisor reads it for the node's filesystems: per block device, the I/O
the kernel counted since boot (container_fs_{reads,writes}{,_merged}_total, sectors, seconds
spent, I/Os in progress, I/O time and weighted I/O time of the root's filesystems)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DiskStats:
    reads: int
    reads_merged: int
    sectors_read: int
    read_seconds: float
    writes: int
    writes_merged: int
    sectors_written: int
    write_seconds: float
    io_in_progress: int
    io_seconds: float
    weighted_io_seconds: float


def read_diskstats(path: Path) -> dict[str, DiskStats]:
    """By device path (/dev/<name>), as cAdvisor keys them; {} when the file cannot be read."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 14 or not all(f.isdigit() for f in fields[3:14]) or "/" in fields[2]:
            continue
        n = [int(f) for f in fields[3:14]]
        found[f"/dev/{fields[2]}"] = DiskStats(
            reads=n[0], reads_merged=n[1], sectors_read=n[2], read_seconds=n[3] / 1000,
            writes=n[4], writes_merged=n[5], sectors_written=n[6], write_seconds=n[7] / 1000,
            io_in_progress=n[8], io_seconds=n[9] / 1000, weighted_io_seconds=n[10] / 1000)
    return found
