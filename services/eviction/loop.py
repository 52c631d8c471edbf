"""Running the eviction manager: a full cycle every MONITORING_PERIOD (the kubelet's
housekeeping), and at once when the memory poll sees a threshold met, pod-sync answers a disk
reclaim, or a held pressure condition may end. The memory poll reads more often the closer memory
is to a threshold."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from services.eviction.manager import MONITORING_PERIOD, EvictionManager

log = logging.getLogger(__name__)

MEMORY_POLL = 0.5  # seconds between memory reads near a threshold
# The fastest memory growth (bytes/s) the poll keeps up with: the next read comes before growth at
# this rate could use up the headroom left, so a node far from its thresholds reads memory every
# few seconds and one close to them every MEMORY_POLL. (The kubelet reads it every 10 s.)
MEMORY_GROWTH = 1 << 30


class EvictionLoop:
    """Runs the manager: a full cycle every MONITORING_PERIOD, or at once when the memory poll
    sees a threshold met, pod-sync answers a reclaim, or a held condition may end."""

    def __init__(self, manager: EvictionManager, memory_poll: float = MEMORY_POLL) -> None:
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
        delay = self.memory_poll
        while True:
            await asyncio.sleep(delay)
            try:
                headroom = self.manager.memory_headroom()
            except Exception as exc:  # a cgroup file gone for a moment: the cycle logs real trouble
                log.debug("memory poll: %s", exc)
                delay = self.memory_poll
                continue
            delay = self.next_poll_in(headroom)
            if headroom is not None and headroom < 0:
                self.wake.set()

    def next_poll_in(self, headroom: int | None) -> float:
        """Seconds until the next memory read, given the headroom the last one found."""
        if headroom is None:
            return MONITORING_PERIOD  # no memory threshold: nothing to poll for
        return min(MONITORING_PERIOD, max(self.memory_poll, headroom / MEMORY_GROWTH))
