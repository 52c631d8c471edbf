"""Running the eviction manager: a full cycle every MONITORING_PERIOD (the kubelet's
housekeeping), and at once when the memory poll sees a threshold met, pod-sync answers a disk
reclaim, or a held pressure condition may end."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from services.eviction.manager import MONITORING_PERIOD, EvictionManager

log = logging.getLogger(__name__)


class EvictionLoop:
    """Runs the manager: a full cycle every MONITORING_PERIOD, or at once when the memory poll
    sees a threshold met, pod-sync answers a reclaim, or a held condition may end."""

    def __init__(self, manager: EvictionManager, memory_poll: float = 0.5) -> None:
        self.manager = manager
        self.memory_poll = memory_poll
        self.wake = asyncio.Event()

    async def run_cycles(self, on_synced: Callable[[], None] = lambda: None) -> None:
        failing = False
        while True:
            self.wake.clear()
            try:
                evicted = await self.manager.synchronize()
                on_synced()
                failing = False
            except Exception:
                if not failing:
                    log.exception("eviction cycle failed; retrying every %.0fs", MONITORING_PERIOD)
                failing = True
                evicted = []
            timeout = 1.0 if evicted else MONITORING_PERIOD
            transition = self.manager.next_transition_in()
            if transition is not None:
                timeout = min(timeout, transition + 0.05)
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    async def poll_memory(self) -> None:
        """Between cycles, only memory: it can run out in seconds, disk and pids rarely do."""
        while True:
            await asyncio.sleep(self.memory_poll)
            try:
                if self.manager.memory_threshold_met():
                    self.wake.set()
            except Exception as exc:  # a cgroup file gone for a moment: the cycle logs real trouble
                log.debug("memory poll: %s", exc)
