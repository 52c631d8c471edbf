"""Recording the kubelet's events (Pulling, Created, Started, Killing, BackOff, Unhealthy, ...).

Services publish them on the bus; status-reporter, the only API writer, posts them. Publishing
never blocks the caller: a sync does not wait for an event to be delivered.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from shared.bus.client import Bus
from shared.bus.messages import KubeEvent

log = logging.getLogger(__name__)


class Recorder(Protocol):
    def pod(self, namespace: str, name: str, uid: str, type_: str, reason: str, message: str) -> None: ...


class BusRecorder:
    """Made on the service's loop; pod() may be called there or from another thread of the
    service (the store's, Store.run), whose events are handed to the loop."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._loop = asyncio.get_running_loop()
        self._pending: set[asyncio.Task[None]] = set()

    def pod(self, namespace: str, name: str, uid: str, type_: str, reason: str, message: str) -> None:
        event = KubeEvent(kind="Pod", namespace=namespace, name=name, uid=uid, type=type_, reason=reason,
                          message=message)
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._publish(event)
        else:
            self._loop.call_soon_threadsafe(self._publish, event)

    def _publish(self, event: KubeEvent) -> None:
        task = self._loop.create_task(self.bus.publish(event), name="publish-event")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)


class RecordingRecorder:
    """The fake: keeps (reason, message) pairs for tests."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def pod(self, namespace: str, name: str, uid: str, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events]
