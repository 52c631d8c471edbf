"""usageNanoCores as the kubelet's CRI stats provider computes it: the rate between the previous
cumulative CPU sample of a key (node, cgroup, container, pod) and this one, so the first read
after a start has none."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

# The kubelet's CRI provider drops CPU samples not refreshed for this long.
CPU_CACHE_MAX_AGE = 600.0
# Two reads closer than this keep the previous rate instead of a noisy one from a tiny window.
CPU_MIN_WINDOW = 1.0


@dataclass
class _CpuSample:
    usage: int
    at: float
    rate: int | None
    seen: float


class CpuRates:
    """usageNanoCores from two cumulative CPU samples per key."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, min_window: float = CPU_MIN_WINDOW,
                 max_age: float = CPU_CACHE_MAX_AGE) -> None:
        self._clock = clock
        self.min_window = min_window
        self.max_age = max_age
        self._samples: dict[str, _CpuSample] = {}

    def update(self, key: str, usage_ns: int, at: float) -> int | None:
        """Record a sample taken at `at` (seconds, any clock consistent per key); return the
        rate since the previous sample, or None when there is none to compare with."""
        now = self._clock()
        prev = self._samples.get(key)
        if prev is None or usage_ns < prev.usage:  # new, or the counter restarted
            self._samples[key] = _CpuSample(usage_ns, at, None, now)
            return None
        window = at - prev.at
        if window < self.min_window:
            prev.seen = now
            return prev.rate
        rate = int((usage_ns - prev.usage) / window)  # core-ns per second = nano cores
        self._samples[key] = _CpuSample(usage_ns, at, rate, now)
        return rate

    def expire(self) -> None:
        cutoff = self._clock() - self.max_age
        for key in [k for k, s in self._samples.items() if s.seen < cutoff]:
            del self._samples[key]

    def __len__(self) -> int:
        return len(self._samples)
