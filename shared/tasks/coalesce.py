"""Turning a stream of wake-up events into batched work.

NATS hands a subscription's messages to its handler one at a time, so a handler that does the
work itself (a store pass, an API call) makes every later event wait behind it: under a burst of
pod starts the bus latency grows with the queue. Handlers instead add what changed to a pending
set and return; one named task works through the union, so a burst costs a few passes, not one
pass per event.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Iterable

log = logging.getLogger(__name__)


class Coalescer:
    def __init__(self, name: str, work: Callable[[set[str] | None], Awaitable[None]]) -> None:
        """work(keys): handle these keys; None means everything."""
        self.name = name
        self.work = work
        self._pending: set[str] = set()
        self._all = False
        self._wake = asyncio.Event()

    def add(self, keys: Iterable[str] | None = None) -> None:
        if keys is None:
            self._all = True
        else:
            self._pending.update(keys)
        self._wake.set()

    async def handle(self, event: object) -> None:
        """A bus handler: the event's `uids` (or everything when it has none). Any event will do,
        so this floor needs nothing of the bus."""
        self.add(getattr(event, "uids", None))

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            keys: set[str] | None = None if self._all else self._pending
            self._pending, self._all = set(), False
            try:
                await self.work(keys)
            except Exception:  # the next event or the periodic resync tries again
                log.exception("%s failed", self.name)
