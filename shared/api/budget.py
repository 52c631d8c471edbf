"""The node's Kubernetes API budget (kubeAPIQPS / kubeAPIBurst), shared by every process.

The kubelet has one client and one token bucket. pykubelet's cluster-mode services each have a
client, so a bucket per process would let the node send several times what the config allows.
The bucket therefore lives in a small file under the root dir (two doubles: tokens saved up, and
when they were counted) that every process updates under an exclusive lock: whoever needs a
token takes it, and the node as a whole never exceeds qps a second after a burst of `burst`.
"""

from __future__ import annotations

import asyncio
import fcntl
import math
import os
import struct
import time
from pathlib import Path

# Tokens saved up, and CLOCK_MONOTONIC seconds (one clock for the whole machine) of the last refill.
_STATE = struct.Struct("dd")


def budget_file(root_dir: Path) -> Path:
    return root_dir / "run" / "kube-api-budget"


class SharedTokenBucket:
    def __init__(self, path: Path, qps: float, burst: int) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"kube API budget needs qps > 0 and burst >= 1 (got {qps}, {burst})")
        self.path = path
        self.qps = qps
        self.burst = burst
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._local = asyncio.Lock()  # one waiter per process at a time; the file lock orders the rest

    def close(self) -> None:
        os.close(self._fd)

    def try_take(self) -> float:
        """Take a token if there is one (0.0); otherwise the seconds until there will be."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(self._fd, _STATE.size, 0)
            now = time.monotonic()
            tokens, last = _STATE.unpack(raw) if len(raw) == _STATE.size else (float(self.burst), now)
            if not (math.isfinite(last) and last <= now and 0.0 <= tokens <= self.burst):
                # A damaged file (or a machine reboot: the monotonic clock started over): a full
                # bucket, as at the first start.
                tokens, last = float(self.burst), now
            tokens = max(0.0, min(float(self.burst), tokens + (now - last) * self.qps))
            wait = 0.0
            if tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / self.qps
            os.pwrite(self._fd, _STATE.pack(tokens, now), 0)
            return wait
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    async def acquire(self) -> None:
        async with self._local:
            while (wait := self.try_take()) > 0:
                await asyncio.sleep(wait)
