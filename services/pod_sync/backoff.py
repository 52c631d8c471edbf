"""Per-key exponential back-off with the kubelet's semantics (flowcontrol.Backoff).

The first failure is retried at once; later ones wait initial, 2*initial, ... up to the cap. An
entry that has not been bumped for twice the cap is forgotten, so a container that ran well for
that long starts over at the initial delay.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


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

    def forget(self, prefix: str) -> None:
        for key in [k for k in self._entries if k.startswith(prefix)]:
            del self._entries[key]
