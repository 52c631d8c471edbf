"""A stand-in for systemd-logind (services/eviction/logind.py) in the unit tests: it keeps the
delay locks it handed out (real descriptors, so a test sees whether the manager closed them),
reads InhibitDelayMaxSec from the drop-in directory on reload as logind would, and announces a
shutdown (or its cancellation) when the test says so."""

from __future__ import annotations

import os
import queue
import re
import threading
from pathlib import Path
from typing import Iterator

from jeepney.fds import FileDescriptor


class FakeLogind:
    def __init__(self, inhibit_delay: float = 5.0, conf_dir: Path | None = None) -> None:
        self.delay = inhibit_delay
        self.conf_dir = conf_dir
        self.reloads = 0
        self.locks: list[tuple[str, str, int]] = []  # (who, why, the descriptor logind keeps)
        self._signals: queue.Queue[bool] = queue.Queue()

    def inhibit_delay(self) -> float:
        return self.delay

    def delay_shutdown(self, who: str, why: str) -> FileDescriptor:
        ours, theirs = os.pipe()
        self.locks.append((who, why, ours))
        return FileDescriptor(theirs)

    def held_locks(self) -> int:
        """Locks whose holder has not closed its end (logind sees the pipe's writer still open)."""
        held = 0
        for _, _, fd in self.locks:
            os.set_blocking(fd, False)
            try:
                held += os.read(fd, 1) != b""
            except BlockingIOError:
                held += 1
        return held

    def reload(self) -> None:
        self.reloads += 1
        if self.conf_dir is None:
            return
        for f in sorted(self.conf_dir.glob("*.conf")):
            m = re.search(r"^InhibitDelayMaxSec=(\d+)", f.read_text(), re.M)
            if m:
                self.delay = float(m.group(1))

    def announce(self, shutting_down: bool) -> None:
        self._signals.put(shutting_down)

    def shutdown_signals(self, stop: threading.Event, poll: float = 0.05) -> Iterator[bool]:
        while not stop.is_set():
            try:
                yield self._signals.get(timeout=poll)
            except queue.Empty:
                continue
