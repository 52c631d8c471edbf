"""Running a step periodically, forever, through failures: log when it starts and stops failing,
not on every attempt, so an API server outage is two log lines, not hundreds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable


async def every(period: float, what: str, step: Callable[[], Awaitable[object]], log: logging.Logger,
                wake: asyncio.Event | None = None) -> None:
    """wake: set it to run the next step now instead of at the end of the period."""
    failing = False
    while True:
        if wake is not None:
            wake.clear()
        try:
            await step()
            if failing:
                log.info("%s works again", what)
            failing = False
        except Exception as exc:  # the next round tries again; pods keep running meanwhile
            if not failing:
                log.warning("%s failed (%s); retrying every %.0fs", what, exc or type(exc).__name__, period)
            failing = True
        if wake is None:
            await asyncio.sleep(period)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), period)
