"""Node resource signals with the kubelet's names, read from /proc and statvfs."""

from __future__ import annotations

import os
from pathlib import Path

from shared.host import parse_meminfo


def memory_available_bytes(meminfo: str = "/proc/meminfo") -> int:
    fields = parse_meminfo(Path(meminfo).read_text())
    return fields.get("MemAvailable", fields.get("MemFree", 0))


def fs_available_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def node_signals(root_dir: str) -> dict[str, int]:
    return {
        "memory.available": memory_available_bytes(),
        "nodefs.available": fs_available_bytes(root_dir),
    }
