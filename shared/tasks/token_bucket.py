"""A token bucket as client-go's flowcontrol.NewTokenBucketRateLimiter: qps tokens a second, at
most burst saved up, full at the start. acquire() waits for a token (the status-reporter's
events, eventRecordQPS); try_acquire() takes one only if there is one (image pulls,
registryPullQPS: the kubelet fails a pull over the rate rather than queueing it)."""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now

    def try_acquire(self) -> bool:
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    async def acquire(self) -> None:
        async with self._lock:
            while not self.try_acquire():
                await asyncio.sleep((1 - self._tokens) / self.qps)
