"""PLEG: relist the runtime every period and wake the worker of every pod that changed.

Comparing full relists (not a stream of runtime events) keeps it level-triggered: a restart of
pod-sync or containerd simply means the first relist reports everything once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from prometheus_client import Gauge, Histogram

from services.pod_sync.runtime_view import list_managed_uids
from shared.cri import CRIError, RuntimeService

log = logging.getLogger(__name__)

RELIST_DURATION = Histogram("kubelet_pleg_relist_duration_seconds",
                            "Duration in seconds for relisting pods in PLEG.")
RELIST_INTERVAL = Histogram("kubelet_pleg_relist_interval_seconds",
                            "Interval in seconds between relisting in PLEG.")
LAST_SEEN = Gauge("kubelet_pleg_last_seen_seconds",
                  "Timestamp in seconds when PLEG was last seen active.")

# The kubelet calls PLEG unhealthy when a relist has not completed for 3 minutes.
UNHEALTHY_AFTER = 180.0


class PLEG:
    def __init__(self, runtime: RuntimeService, period: float, on_changed: Callable[[set[str]], None]) -> None:
        self.runtime = runtime
        self.period = period
        self.on_changed = on_changed
        self._last: dict[str, tuple] | None = None
        self.last_relist: float = 0.0
        self.last_error: str = ""

    def healthy(self) -> tuple[bool, str]:
        if not self.last_relist:
            return False, "PLEG has not relisted yet"
        age = time.monotonic() - self.last_relist
        if age > UNHEALTHY_AFTER:
            return False, f"PLEG is not healthy: pleg was last seen active {age:.0f}s ago"
        return True, "ok"

    async def relist(self) -> set[str]:
        start = time.monotonic()
        if self.last_relist:
            RELIST_INTERVAL.observe(start - self.last_relist)
        current = await list_managed_uids(self.runtime)
        RELIST_DURATION.observe(time.monotonic() - start)
        self.last_relist = time.monotonic()
        LAST_SEEN.set(time.time())
        previous = self._last or {}
        self._last = current
        return {uid for uid in current.keys() | previous.keys() if current.get(uid) != previous.get(uid)}

    async def run(self) -> None:
        while True:
            try:
                changed = await self.relist()
                self.last_error = ""
                if changed:
                    self.on_changed(changed)
            except CRIError as exc:
                if str(exc) != self.last_error:
                    log.warning("PLEG relist failed: %s", exc)
                self.last_error = str(exc)
            await asyncio.sleep(self.period)
