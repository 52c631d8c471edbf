"""Retrying and back-off, in one place.

- `until_done`: retry one operation (connect, register, wait for readiness) with exponential
  back-off, jitter and a cap, optionally up to a deadline;
- `keep_running`: run a long-lived loop (a watch, a child process) again whenever it fails,
  with the same back-off, starting over once it has run well for a while;
- `Backoff`: per-key back-off with the kubelet's semantics, for what a sync loop holds back
  (container restarts, image pulls, volume setup) instead of sleeping on.

Each failure is logged with what is retried and when: an outage reads as a handful of lines
whose delays grow to the cap.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential_jitter,
)

T = TypeVar("T")


MESSAGE_CHARS = 300


def describe(exc: BaseException) -> str:
    """An error in one line: an API error as its status, reason and message (what to do next is
    often in it), not its headers and body."""
    status, reason = getattr(exc, "status", None), getattr(exc, "reason", None)
    if status is not None and reason is not None:
        message = str(getattr(exc, "message", "") or "").strip()
        first = message.splitlines()[0][:MESSAGE_CHARS] if message else ""
        return f"{status} {reason}: {first}" if first else f"{status} {reason}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _log_failure(what: str, log: logging.Logger, level: int) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        log.log(level, "%s failed: %s; retrying in %.1fs (failure %d)", what,
                describe(exc) if exc else "no result", delay, state.attempt_number)
    return before_sleep


async def until_done(what: str, fn: Callable[[], Awaitable[T]], log: logging.Logger, *,
                     initial: float = 1.0, cap: float = 30.0, timeout: float | None = None,
                     retry_on: tuple[type[BaseException], ...] = (Exception,),
                     level: int = logging.WARNING) -> T:
    """fn's result, once it succeeds. Failures of the retry_on kinds wait initial, 2*initial,
    ... (plus up to half of initial of jitter, so processes do not retry in step) up to cap;
    after `timeout` seconds the last failure is raised. Other exceptions are raised at once."""
    retrying = AsyncRetrying(
        wait=wait_exponential_jitter(multiplier=initial, max=cap, jitter=initial / 2),
        stop=stop_after_delay(timeout) if timeout is not None else stop_never,
        retry=retry_if_exception_type(retry_on),
        before_sleep=_log_failure(what, log, level),
        reraise=True)
    return await retrying(fn)


async def keep_running(what: str, run: Callable[[], Awaitable[object]], log: logging.Logger, *,
                       initial: float = 1.0, cap: float = 30.0, healthy_after: float = 60.0) -> None:
    """Run `run` forever: again at once when it returns, after a back-off when it fails. A run
    that lasted healthy_after before failing starts the back-off over."""

    async def attempt() -> None:
        started = time.monotonic()
        try:
            await run()
        except Exception as exc:
            ran = time.monotonic() - started
            if ran < healthy_after:
                raise
            log.warning("%s failed after running %.0fs: %s; starting it again", what, ran, describe(exc))

    while True:
        await until_done(what, attempt, log, initial=initial, cap=cap)


@dataclass
class _Entry:
    delay: float
    last_update: float


class Backoff:
    def __init__(self, initial: float, cap: float, clock: Callable[[], float] = time.time) -> None:
        self.initial = initial
        self.cap = cap
        self.clock = clock
        self._entries: dict[str, _Entry] = {}

    def _expired(self, entry: _Entry, event_time: float) -> bool:
        return event_time - entry.last_update > 2 * self.cap

    def remaining(self, key: str, event_time: float) -> float:
        """Seconds still to wait after an event at `event_time`; 0 when not backing off."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            return 0.0
        return max(0.0, entry.delay - (self.clock() - event_time))

    def remaining_since_last_failure(self, key: str) -> float:
        entry = self._entries.get(key)
        return self.remaining(key, entry.last_update) if entry else 0.0

    def current(self, key: str) -> float:
        entry = self._entries.get(key)
        return entry.delay if entry else 0.0

    def next(self, key: str, event_time: float) -> None:
        """Record a failure at `event_time`, growing this key's delay."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            self._entries[key] = _Entry(self.initial, event_time)
        else:
            entry.delay = min(entry.delay * 2, self.cap)
            entry.last_update = event_time

    def failed(self, key: str) -> float:
        """Record a failure now; the seconds to wait before trying this key again."""
        self.next(key, self.clock())
        return self.current(key)

    def waiting(self) -> dict[str, float]:
        """Every key with a recorded failure: seconds until it may be tried again (0: now)."""
        return {key: self.remaining_since_last_failure(key) for key in self._entries}

    def forget(self, prefix: str) -> None:
        for key in [k for k in self._entries if k.startswith(prefix)]:
            del self._entries[key]
