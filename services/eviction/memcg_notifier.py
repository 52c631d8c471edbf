"""kernelMemcgNotification: the kernel says when memory use crosses a memory eviction threshold,
and the eviction cycle runs at once, as with the kubelet's memory threshold notifier.

cgroup v1 has memory thresholds: an eventfd registered in a memory cgroup's cgroup.event_control
against its memory.usage_in_bytes and a number of bytes is signalled when usage crosses that
number (either way). The number is where a threshold's signal would be met: the signal's
capacity less the threshold, plus the cgroup's inactive file pages (usage counts them, the working
set does not). It moves with the page cache, so it is registered again every REFRESH seconds, as
the kubelet does (notifierRefreshInterval). memory.available watches the root memory cgroup,
allocatableMemory.available the pods' cgroup.

cgroup v2 has no such thresholds; there the kubelet's notifier does nothing, and so does this:
memory is polled (services/eviction/loop.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.eviction.signals import SignalReader
from shared.config.thresholds import Threshold
from shared.host.cgroups import CgroupReader

log = logging.getLogger(__name__)

REFRESH = 10.0  # seconds between registrations (the kubelet's notifierRefreshInterval)
MEMORY_SIGNALS = ("memory.available", "allocatableMemory.available")


@dataclass(frozen=True)
class Target:
    description: str  # as the kubelet names its notifier: "hard memory eviction threshold"
    cgroup: str       # "/" or the pods' cgroup
    usage: int        # the memory.usage_in_bytes the kernel signals at


def describe(t: Threshold) -> str:
    return (f"{'hard' if t.hard else 'soft'} {'allocatable ' if t.signal != 'memory.available' else ''}"
            "memory eviction threshold")


def targets(thresholds: list[Threshold], signals: SignalReader) -> list[Target]:
    """Where each memory threshold would be met, as memory.usage_in_bytes of its cgroup."""
    out = []
    for t in thresholds:
        if t.signal not in MEMORY_SIGNALS:
            continue
        root = t.signal == "memory.available"
        cgroup = "/" if root else signals.cgroups.kubepods()
        sample = signals.cgroups.sample(cgroup)
        if sample.memory_usage is None or sample.working_set is None:
            continue
        # The signals' capacities (services/eviction/signals.py): the node's memory, or allocatable.
        capacity = signals.memory_capacity if root else signals.allocatable_memory
        inactive = sample.memory_usage - sample.working_set
        out.append(Target(describe(t), cgroup, max(0, capacity - t.value.of(capacity) + inactive)))
    return out


class MemcgNotifier:
    """Registers the targets' thresholds with the kernel and calls on_crossed(message) when one is
    crossed. Its eventfds are read on the event loop."""

    def __init__(self, cgroups: CgroupReader, on_crossed: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cgroups = cgroups
        self.on_crossed = on_crossed
        self.clock = clock
        self._fds: list[int] = []
        self._registered_at: float | None = None
        self._failing = False

    @property
    def supported(self) -> bool:
        return self.cgroups.version == 1

    def refresh(self, make_targets: Callable[[], list[Target]]) -> None:
        """Register the thresholds anew when REFRESH has passed since the last time."""
        now = self.clock()
        if self._registered_at is not None and now - self._registered_at < REFRESH:
            return
        self._registered_at = now
        try:
            wanted = make_targets()
            self.close()
            for target in wanted:
                self._register(target)
        except (OSError, ValueError) as exc:
            self.close()
            if not self._failing:
                log.warning("kernelMemcgNotification: cannot register a memory threshold (%s); memory is polled "
                            "until it can", exc)
            self._failing = True
            return
        if self._failing:
            log.info("kernelMemcgNotification: memory thresholds registered again")
        self._failing = False
        for target in wanted:
            log.debug("memory threshold notifier: %s at memory.usage_in_bytes %d of %s", target.description,
                      target.usage, target.cgroup)

    def _register(self, target: Target) -> None:
        directory = self.cgroups.path("memory", target.cgroup)
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            usage = os.open(directory / "memory.usage_in_bytes", os.O_RDONLY | os.O_CLOEXEC)
            try:
                control = os.open(directory / "cgroup.event_control", os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(control, f"{efd} {usage} {target.usage}".encode())
                finally:
                    os.close(control)
            finally:
                os.close(usage)  # the kernel holds what it needs
        except BaseException:
            os.close(efd)
            raise
        self._fds.append(efd)
        asyncio.get_running_loop().add_reader(efd, self._fire, efd, target.description)

    def _fire(self, efd: int, description: str) -> None:
        try:
            os.eventfd_read(efd)
        except BlockingIOError:
            return
        self.on_crossed(f"eviction manager: {description} crossed")

    def close(self) -> None:
        """Closing an eventfd unregisters its threshold in the kernel."""
        loop = asyncio.get_running_loop()
        for fd in self._fds:
            loop.remove_reader(fd)
            os.close(fd)
        self._fds = []
