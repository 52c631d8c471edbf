"""Steady-state cost of an agent: CPU (cores) and memory (PSS, so pages shared between processes
count once) of its processes over a window. containerd is excluded for both agents."""

from __future__ import annotations

import time
from pathlib import Path

from bench.stats import cpu_seconds


def pss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


class CpuWindow:
    """CPU used by some processes from now until .stop()."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
        self.t0 = time.monotonic()

    def stop(self) -> dict:
        elapsed = time.monotonic() - self.t0
        cpu = {n: (cpu_seconds(p) - self.cpu0[n]) / elapsed for n, p in self.pids.items()}
        pss = {n: pss_bytes(p) for n, p in self.pids.items()}
        return {"seconds": round(elapsed, 1), "cpu_cores": round(sum(cpu.values()), 4),
                "pss_mib": round(sum(pss.values()) / 2**20, 1),
                "per_process": {n: {"cpu_cores": round(cpu[n], 4), "pss_mib": round(pss[n] / 2**20, 1)}
                                for n in self.pids}}


def measure(pids: dict[str, int], seconds: float) -> dict:
    window = CpuWindow(pids)
    time.sleep(seconds)
    return window.stop()
