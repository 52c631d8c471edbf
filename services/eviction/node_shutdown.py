"""Graceful node shutdown (shutdownGracePeriod, shutdownGracePeriodCriticalPods,
shutdownGracePeriodByPodPriority), as the kubelet's node shutdown manager does it on systemd:

- At start, logind must allow an inhibitor to hold a shutdown for the whole grace period
  (InhibitDelayMaxSec); if it does not, a drop-in raises it and logind is reloaded. Then a
  "delay" lock on shutdown is taken.
- When logind announces a shutdown (PrepareForShutdown true), the node is marked shutting down
  (the Node turns NotReady, new pods are refused) and its pods are stopped group by group, lowest
  priority first: each group's pods at once, each with the group's period or its own
  terminationGracePeriodSeconds if shorter, and the next group once they are gone or the period
  is over. They end Failed with reason Terminated. Then the lock is let go and systemd goes on.
- A cancelled shutdown (PrepareForShutdown false) ends it: static pods run again, the lock is
  taken again. API pods that were stopped stay Failed, as with the kubelet.

The decisions go to eviction's tables (node_shutdown, pod_evictions with reason Terminated);
pod-sync stops the pods and status-reporter reports them, as for an eviction.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from prometheus_client import Gauge
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from shared.bus.messages import Event, EvictionsDecided, KubeEvent, NodeShutdownChanged
from shared.config.settings import KubeletConfiguration
from shared.model.podspec import PodCache
from shared.model.qos import SYSTEM_CRITICAL_PRIORITY
from shared.store import DesiredPod, NodeShutdown, PodEviction, PodRuntime, Store
from shared.store import node_shutdown as shutdown
from shared.store.models import utcnow
from shared.tasks.retry import until_done

if TYPE_CHECKING:  # D-Bus is loaded only on a node that asks for graceful shutdown
    from jeepney.fds import FileDescriptor

    from services.eviction.logind import Inhibitor

log = logging.getLogger(__name__)

WHO = "pykubelet"
WHY = "pykubelet needs time to stop the node's pods (shutdownGracePeriod)"
LOGIND_DROPIN = Path("/etc/systemd/logind.conf.d/99-pykubelet.conf")
# How long logind may take to apply a reloaded InhibitDelayMaxSec.
RELOAD_WAIT = 5.0
POLL = 0.5  # seconds between looks at whether a group's pods are gone

START_TIME = Gauge("kubelet_graceful_shutdown_start_time_seconds",
                   "Last graceful shutdown start time since unix epoch in seconds")
END_TIME = Gauge("kubelet_graceful_shutdown_end_time_seconds",
                 "Last graceful shutdown end time since unix epoch in seconds")


class Publisher(Protocol):
    async def publish(self, event: Event) -> None: ...


@dataclass(frozen=True)
class Group:
    """Pods of this priority and up (to the next group's) get `seconds` to stop."""
    priority: int
    seconds: int


def shutdown_groups(k: KubeletConfiguration) -> list[Group]:
    """The groups, lowest priority first. shutdownGracePeriod and shutdownGracePeriodCriticalPods
    are two groups, as the kubelet reads them: everything below system-critical priority gets
    the period less the critical pods' share, system-critical pods get their share. Empty: the
    feature is off."""
    if k.shutdown_grace_period_by_pod_priority:
        return sorted((Group(p.priority, p.shutdown_grace_period_seconds) for p in k.shutdown_grace_period_by_pod_priority),
                      key=lambda g: g.priority)
    total, critical = int(k.shutdown_grace_period), int(k.shutdown_grace_period_critical_pods)
    if total <= 0:
        return []
    return [Group(0, total - critical), Group(SYSTEM_CRITICAL_PRIORITY, critical)]


def group_of(priority: int, groups: list[Group]) -> Group:
    """The group with the highest priority not above the pod's; below all of them, the lowest."""
    found = groups[0]
    for g in groups:
        if g.priority <= priority:
            found = g
    return found


@dataclass(frozen=True)
class Stoppable:
    uid: str
    namespace: str
    name: str
    priority: int
    grace: int  # terminationGracePeriodSeconds


class NodeShutdownManager:
    def __init__(self, store: Store, bus: Publisher, logind: Inhibitor, groups: list[Group], this_boot: str,
                 dropin: Path = LOGIND_DROPIN, clock: Callable[[], float] = time.monotonic,
                 poll: float = POLL) -> None:
        self.store = store
        self.bus = bus
        self.logind = logind
        self.groups = groups
        self.this_boot = this_boot
        self.dropin = dropin
        self.clock = clock
        self.poll = poll
        self.period = sum(g.seconds for g in groups)
        self._lock: FileDescriptor | None = None
        self._pods = PodCache()

    # -- start ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Forget a shutdown of an earlier boot, make sure logind lets the lock hold the whole
        period, take the lock."""
        if await self.store.run(self._end_other_boots):
            await self._announce_end()
        await asyncio.to_thread(self._ensure_inhibit_delay)
        await asyncio.to_thread(self._take_lock)

    def _ensure_inhibit_delay(self) -> None:
        current = self.logind.inhibit_delay()
        if current >= self.period:
            return
        log.info("systemd-logind lets an inhibitor delay a shutdown %.0fs, shutdownGracePeriod is %ds: raising "
                 "InhibitDelayMaxSec in %s", current, self.period, self.dropin)
        self.dropin.parent.mkdir(parents=True, exist_ok=True)
        self.dropin.write_text(f"# pykubelet's graceful node shutdown (shutdownGracePeriod)\n[Login]\n"
                               f"InhibitDelayMaxSec={self.period}\n")
        self.logind.reload()
        deadline = time.monotonic() + RELOAD_WAIT
        while (current := self.logind.inhibit_delay()) < self.period:
            if time.monotonic() > deadline:
                raise RuntimeError(f"systemd-logind still lets an inhibitor delay a shutdown only {current:.0f}s after "
                                   f"{self.dropin} raised InhibitDelayMaxSec to {self.period}s (shutdownGracePeriod): "
                                   "does another drop-in in /etc/systemd/logind.conf.d set it lower?")
            time.sleep(0.2)

    def _take_lock(self) -> None:
        if self._lock is None:
            self._lock = self.logind.delay_shutdown(WHO, WHY)
            log.info("holding systemd-logind's shutdown delay lock: a shutdown waits up to %ds for the pods", self.period)

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- signals --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Take the lock, then act on each PrepareForShutdown logind sends."""
        signals: asyncio.Queue[bool] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        stop = threading.Event()

        def watch() -> None:
            failing = False
            while not stop.is_set():
                try:
                    for active in self.logind.shutdown_signals(stop):
                        loop.call_soon_threadsafe(signals.put_nowait, active)
                    failing = False
                except Exception:  # the bus restarted: listen again
                    if not failing:
                        log.exception("lost systemd-logind's PrepareForShutdown signal; listening again every 5s")
                    failing = True
                    stop.wait(5.0)

        # Listening before the lock is taken: a shutdown begun in between is not missed.
        thread = threading.Thread(target=watch, name="logind-shutdown-signals", daemon=True)
        thread.start()
        try:
            await self._start_until_done()
            while True:
                if await signals.get():
                    await self.shut_down()
                else:
                    await self.cancelled()
        finally:
            stop.set()

    async def _start_until_done(self) -> None:
        await until_done("taking systemd-logind's shutdown delay lock", self.start, log, initial=2.0, cap=60.0)

    # -- a shutdown -----------------------------------------------------------------------------

    async def shut_down(self) -> None:
        started = time.time()
        log.info("the node is shutting down: stopping its pods within %ds (shutdownGracePeriod)", self.period)
        START_TIME.set(started)
        await self.store.run(self._write_started)
        await self.bus.publish(NodeShutdownChanged())
        await self.bus.publish(shutdown_event("Shutdown manager detected shutdown event"))
        pods = await self.store.run(self._running_pods)
        for group in self.groups:
            members = [p for p in pods if group_of(p.priority, self.groups) == group]
            if not members:
                continue
            log.info("stopping %d pod(s) of priority %d and up within %ds: %s", len(members), group.priority,
                     group.seconds, ", ".join(f"{p.namespace}/{p.name}" for p in members))
            await self.store.run(self._write_decisions, members, group)
            await self.bus.publish(EvictionsDecided(uids=[p.uid for p in members]))
            await self._wait_gone({p.uid: f"{p.namespace}/{p.name}" for p in members}, group.seconds)
        # The node stays shutting down (no pod starts) until the shutdown is cancelled or the
        # next boot.
        await self.store.run(self._write_pods_stopped)
        END_TIME.set(time.time())
        log.info("the node's pods stopped in %.1fs; letting systemd-logind go on with the shutdown",
                 time.time() - started)
        self._release_lock()

    async def _wait_gone(self, names: dict[str, str], seconds: int) -> None:
        """Until the pods (uid: namespace/name) are gone, or `seconds` passed."""
        deadline = self.clock() + seconds
        while True:
            running = await self.store.run(self._still_running, set(names))
            if not running:
                return
            if self.clock() >= deadline:
                log.warning("%d pod(s) still running after their %ds of the shutdown grace period: %s",
                            len(running), seconds, ", ".join(sorted(names[u] for u in running)))
                return
            await asyncio.sleep(min(self.poll, max(0.0, deadline - self.clock())))

    async def cancelled(self) -> None:
        await self.bus.publish(shutdown_event("Shutdown manager detected shutdown cancellation"))
        ended = await self.store.run(self._end_shutdown)
        if ended:
            log.info("the node's shutdown was cancelled: static pods run again, the node admits pods again")
            await self._announce_end()
        await asyncio.to_thread(self._take_lock)

    async def _announce_end(self) -> None:
        await self.bus.publish(NodeShutdownChanged())  # pod-sync looks at every pod again

    # -- the store ------------------------------------------------------------------------------

    def _write_started(self) -> None:
        with self.store.session() as s:
            s.merge(NodeShutdown(id=1, boot_id=self.this_boot, in_progress=True, started_at=utcnow(), ended_at=None))

    def _write_pods_stopped(self) -> None:
        with self.store.session() as s:
            if (row := s.get(NodeShutdown, 1)) is not None:
                row.ended_at = utcnow()

    def _end_shutdown(self) -> bool:
        """Ends a shutdown in progress. True when there was one."""
        with self.store.session() as s:
            row = s.get(NodeShutdown, 1)
            if row is None or not row.in_progress:
                return False
            _end(s, row)
            return True

    def _end_other_boots(self) -> bool:
        """A shutdown recorded in an earlier boot is over, whether or not its pods all stopped.
        Sets the metrics from the record. True when there was one to end."""
        with self.store.session() as s:
            row = s.get(NodeShutdown, 1)
            if row is None:
                return False
            ended = row.boot_id != self.this_boot and row.in_progress
            if ended:
                _end(s, row)
            START_TIME.set(row.started_at.timestamp())
            if row.ended_at is not None:
                END_TIME.set(row.ended_at.timestamp())
            return ended

    def _running_pods(self) -> list[Stoppable]:
        """Admitted pods not stopped yet (a pod already failed or finished has nothing to stop)."""
        with self.store.session() as s:
            rows = list(s.scalars(select(DesiredPod).where(DesiredPod.admitted.is_(True), DesiredPod.finished.is_(False),
                                                           DesiredPod.rejection_reason == "")))
        out = []
        for row in rows:
            pod = self._pods.get(row.uid, row.manifest)
            out.append(Stoppable(row.uid, row.namespace, row.name, pod.spec.priority or 0,
                                 pod.spec.terminationGracePeriodSeconds))
        return out

    def _write_decisions(self, members: list[Stoppable], group: Group) -> None:
        with self.store.session() as s:
            for p in members:
                s.merge(PodEviction(uid=p.uid, namespace=p.namespace, name=p.name, signal=shutdown.SIGNAL,
                                    reason=shutdown.TERMINATED, message=shutdown.TERMINATED_MESSAGE,
                                    grace_period_seconds=min(p.grace, group.seconds), decided_at=utcnow()))

    def _still_running(self, uids: set[str]) -> set[str]:
        """The pods among uids whose containers or sandbox still run (pod-sync's record)."""
        with self.store.session() as s:
            rows = list(s.scalars(select(PodRuntime).where(PodRuntime.uid.in_(uids))))
        return {r.uid for r in rows if r.sandbox_ready or any(c.get("state") == "running" for c in r.containers or [])}


def shutdown_event(message: str) -> KubeEvent:
    """The Node's event for a shutdown signal from logind, as the kubelet words it."""
    return KubeEvent(kind="Node", type="Normal", reason="Shutdown", message=message)


def _end(s: Session, row: NodeShutdown) -> None:
    """The shutdown is over: its decisions go, so pod-sync runs static pods again."""
    s.execute(delete(PodEviction).where(PodEviction.signal == shutdown.SIGNAL))
    row.in_progress, row.ended_at = False, row.ended_at or utcnow()
    END_TIME.set(row.ended_at.timestamp())
