"""The eviction manager: measure, compare with the thresholds, set the pressure conditions, and
when a threshold holds, free what the node can and then evict one pod per cycle.

Decisions go to eviction's own tables (node_pressure, pod_evictions, reclaim_requests) with an
event that wakes the service that acts on them: pod-sync stops evicted pods and collects garbage,
status-reporter reports the conditions. Nothing here kills anything itself.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Protocol

from prometheus_client import Counter, Gauge
from sqlalchemy import delete, select

from services.eviction.pod_usage import ActivePod, UsageCollector
from services.eviction.ranking import eviction_message, has_storage_limits, is_critical, rank, storage_limit_violation
from services.eviction.signals import Observations, SignalReader
from shared.bus.events import Recorder
from shared.bus.messages import DiskReclaimRequested, Event, EvictionsDecided, NodePressureChanged
from shared.config.thresholds import PRESSURE_CONDITIONS, Threshold
from shared.model.allocation import with_allocation
from shared.model.container_id import runtime_container_id
from shared.model.podspec import PodCache
from shared.model.volume_plugins import EMPTY_DIR
from shared.store import (
    DesiredPod,
    DiskReclaim,
    NodePressure,
    PodEviction,
    PodRuntime,
    PodVolume,
    ReclaimRequest,
    SignalObservation,
    Store,
)
from shared.store.models import utcnow

log = logging.getLogger(__name__)

# The kubelet's housekeeping period; memory is polled faster (see EvictionLoop).
MONITORING_PERIOD = 10.0
# An evicted pod's containers should be gone by then; until they are, nothing else is evicted
# (its memory or disk is about to come back).
CLEANUP_WAIT = 30.0
# How long to wait for pod-sync to answer a disk reclaim before evicting anyway.
RECLAIM_WAIT = 30.0
LOCAL_STORAGE = "local-storage"
RECORD_CHANGE, RECORD_EVERY = 0.005, 60.0

EVICTIONS = Counter("kubelet_evictions", "Cumulative number of pod evictions by eviction signal",
                    ["eviction_signal"])
SIGNAL_AVAILABLE = Gauge("pykubelet_eviction_signal_available", "What the eviction signal has available "
                         "(bytes, inodes or pids)", ["signal"])


class Publisher(Protocol):
    async def publish(self, event: Event) -> None: ...


@dataclass
class Met:
    threshold: Threshold
    available: int
    limit: int

    def describe(self) -> str:
        kind = "hard" if self.threshold.hard else "soft"
        return (f"{self.threshold.signal} {_human(self.available, self.threshold.resource)} < "
                f"{_human(self.limit, self.threshold.resource)} ({kind} threshold {self.threshold.written})")


def _human(n: int, resource: str) -> str:
    if resource in ("memory", "ephemeral-storage"):
        return f"{n / 2**20:.0f}Mi"
    return str(n)


def _priority(t: Threshold) -> int:
    """Memory first (nothing to reclaim but pods), then pids, then disk, as the kubelet orders."""
    return {"memory": 0, "pids": 1}.get(t.resource, 2)


class EvictionManager:
    def __init__(self, store: Store, bus: Publisher, signals: SignalReader, usage: UsageCollector,
                 thresholds: list[Threshold], transition_period: float, max_pod_grace: int,
                 events: Recorder, find_imagefs: Callable[[], Awaitable[Path | None]] | None = None,
                 clock: Callable[[], float] = time.monotonic, local_storage: bool = True) -> None:
        """local_storage false (localStorageCapacityIsolation): pods' local storage limits
        (emptyDir sizeLimit, ephemeral-storage limits) are not enforced."""
        self.store = store
        self.bus = bus
        self.signals = signals
        self.usage = usage
        self.thresholds = thresholds
        self._memory_signals = frozenset(t.signal for t in thresholds if t.resource == "memory")
        self.transition_period = transition_period
        self.max_pod_grace = max_pod_grace
        self.events = events
        self.find_imagefs = find_imagefs
        self.clock = clock
        self.local_storage = local_storage
        self._pods = PodCache()
        self._first_met: dict[tuple[str, bool], float] = {}
        self._unresolved: set[tuple[str, bool]] = set()  # met, not yet back above threshold + minimum reclaim
        self._last_met: dict[str, float] = {}  # condition -> when a threshold of it was last met
        self._waiting_cleanup: dict[str, float] = {}  # evicted uid -> when
        self._reclaim_asked: tuple[int, float] | None = None  # (sequence, when)
        self._nothing_to_evict = False
        self._recorded: dict[str, int] = {}  # signal -> available as last written
        self._recorded_at = -RECORD_EVERY

    # -- measuring ------------------------------------------------------------------------------

    def memory_threshold_met(self) -> bool:
        """The fast check: is any memory threshold met now?"""
        headroom = self.memory_headroom()
        return headroom is not None and headroom < 0

    def memory_headroom(self) -> int | None:
        """Bytes of memory left before the nearest memory threshold is met (negative: met now);
        None without memory thresholds. Memory is polled between cycles: only the signals that
        have a threshold are read."""
        if not self._memory_signals:
            return None
        obs = self.signals.memory(self._memory_signals)
        rooms = [obs[t.signal].available - self._limit(t, obs) for t in self.thresholds if t.signal in obs]
        return min(rooms) if rooms else None

    def _limit(self, t: Threshold, obs: Observations) -> int:
        return t.value.of(obs[t.signal].capacity)

    def _is_met(self, t: Threshold, obs: Observations, with_reclaim: bool = False) -> bool:
        o = obs.get(t.signal)
        if o is None:
            return False
        limit = self._limit(t, obs) + (t.min_reclaim.of(o.capacity) if with_reclaim else 0)
        return o.available < limit

    def _met(self, obs: Observations) -> list[Met]:
        met = []
        for t in self.thresholds:
            key = (t.signal, t.hard)
            if self._is_met(t, obs):
                met.append(Met(t, obs[t.signal].available, self._limit(t, obs)))
            elif key in self._unresolved and self._is_met(t, obs, with_reclaim=True):
                # Back above the threshold but not yet by evictionMinimumReclaim: still met.
                o = obs[t.signal]
                met.append(Met(t, o.available, self._limit(t, obs) + t.min_reclaim.of(o.capacity)))
        self._unresolved = {(m.threshold.signal, m.threshold.hard) for m in met}
        return met

    # -- one cycle ------------------------------------------------------------------------------

    async def synchronize(self) -> list[str]:
        """One housekeeping cycle; returns the UIDs evicted."""
        now = self.clock()
        if self.signals.imagefs is None and self.find_imagefs is not None:
            try:
                self.signals.imagefs = await self.find_imagefs()
                self.find_imagefs = None  # asked once; None means the runtime does not say
            except Exception as exc:  # measured at the root dir until the runtime answers
                log.info("imagefs location not known yet (%s); measuring the root dir's filesystem", exc)
        obs = self.signals.all()
        met = self._met(obs)
        for key in list(self._first_met):
            if key not in self._unresolved:
                del self._first_met[key]
        for m in met:
            self._first_met.setdefault((m.threshold.signal, m.threshold.hard), now)
        await self._update_conditions(met, now)
        await self._record_signals(obs)

        pods = await self._active_pods()
        evicted = await self._local_storage_evictions(pods) if self.local_storage else []
        if evicted:
            return evicted
        actionable = [m for m in met
                      if now - self._first_met[(m.threshold.signal, m.threshold.hard)] >= m.threshold.grace_period]
        if not actionable:
            self._reclaim_asked = None
            self._nothing_to_evict = False
            return []
        if any(now - at < CLEANUP_WAIT for at in self._waiting_cleanup.values()):
            return []  # an evicted pod is still going away
        m = min(actionable, key=lambda m: _priority(m.threshold))
        if m.threshold.resource != "memory" and m.threshold.resource != "pids":
            if not await self._still_short_after_reclaim(m, now):
                return []
        return await self._evict_one(pods, m)

    async def _still_short_after_reclaim(self, m: Met, now: float) -> bool:
        """Disk first goes to garbage: ask pod-sync, wait for its answer, measure again.
        True when pods must still be evicted."""
        if self._reclaim_asked is None:
            seq = await self.store.run(self._request_reclaim, m)
            self._reclaim_asked = (seq, now)
            await self.bus.publish(DiskReclaimRequested(sequence=seq))
            log.info("%s: asked pod-sync to free disk (dead containers, unused images)", m.describe())
            return False
        seq, asked_at = self._reclaim_asked
        with self.store.session() as s:
            done = s.get(DiskReclaim, 1)
        if (done is None or done.answered_sequence < seq) and now - asked_at < RECLAIM_WAIT:
            return False
        self._reclaim_asked = None  # the next cycle asks again before evicting again
        obs = self.signals.filesystems()
        still = self._is_met(m.threshold, obs, with_reclaim=True)
        if not still:
            log.info("%s: freeing images and containers was enough; no eviction", m.describe())
        return still

    def _request_reclaim(self, m: Met) -> int:
        with self.store.session() as s:
            row = s.get(ReclaimRequest, 1)
            if row is None:
                row = ReclaimRequest(id=1, sequence=0)
                s.add(row)
            row.sequence = (row.sequence or 0) + 1
            row.signal = m.threshold.signal
            row.bytes_to_free = max(0, m.limit - m.available)
            row.requested_at = utcnow()
            return row.sequence

    async def _evict_one(self, pods: list[ActivePod], m: Met) -> list[str]:
        resource = m.threshold.resource
        usage = (self.usage.memory_and_processes(pods) if resource in ("memory", "pids")
                 else await self.usage.with_storage(pods))
        ranked = rank(pods, usage, resource)
        if not ranked:
            if not self._nothing_to_evict:  # once per episode, not every half second
                log.warning("%s but no pod can be evicted (the rest are static or critical)", m.describe())
            self._nothing_to_evict = True
            return []
        self._nothing_to_evict = False
        victim = ranked[0]
        grace = 0
        if not m.threshold.hard:
            grace = min(victim.pod.spec.terminationGracePeriodSeconds, self.max_pod_grace)
        message = eviction_message(resource, victim, usage.get(victim.uid))
        log.info("%s: evicting pod %s", m.describe(), victim.pod.full_name)
        await self._evict(victim, m.threshold.signal, message, grace)
        return [victim.uid]

    async def _local_storage_evictions(self, pods: list[ActivePod]) -> list[str]:
        limited = [p for p in pods if has_storage_limits(p) and p.uid not in self._waiting_cleanup]
        if not limited:
            return []
        usage = await self.usage.with_storage(limited)
        evicted = []
        for p in limited:
            message = storage_limit_violation(p, usage[p.uid])
            if message and not is_critical(p):
                log.info("pod %s: %s", p.pod.full_name, message.strip())
                await self._evict(p, LOCAL_STORAGE, message, 0)
                evicted.append(p.uid)
        return evicted

    async def _evict(self, p: ActivePod, signal: str, message: str, grace: int) -> None:
        await self.store.run(self._write_eviction, p, signal, message, grace)
        self._waiting_cleanup[p.uid] = self.clock()
        EVICTIONS.labels(signal).inc()
        self.events.pod(p.pod.metadata.namespace, p.pod.metadata.name, p.uid, "Warning", "Evicted", message)
        await self.bus.publish(EvictionsDecided(uids=[p.uid]))

    def _write_eviction(self, p: ActivePod, signal: str, message: str, grace: int) -> None:
        with self.store.session() as s:
            s.merge(PodEviction(uid=p.uid, namespace=p.pod.metadata.namespace, name=p.pod.metadata.name,
                                signal=signal, message=message, grace_period_seconds=grace, decided_at=utcnow()))

    # -- conditions -----------------------------------------------------------------------------

    async def _update_conditions(self, met: list[Met], now: float) -> None:
        detail: dict[str, list[str]] = {c: [] for c in PRESSURE_CONDITIONS}
        for m in met:
            self._last_met[m.threshold.condition] = now
            detail[m.threshold.condition].append(m.describe())
        wanted = {cond: (bool(detail[cond]) or self._held(cond, now), "; ".join(detail[cond]))
                  for cond in PRESSURE_CONDITIONS}
        # In a thread, as every write of this service: it may wait out another's lock on the store.
        if await self.store.run(self._write_conditions, wanted):
            await self.bus.publish(NodePressureChanged())

    def _write_conditions(self, wanted: dict[str, tuple[bool, str]]) -> bool:
        """Store each condition's (pressure, detail); True when a pressure changed."""
        changed = False
        with self.store.session() as s:
            for cond, (pressure, text) in wanted.items():
                row = s.get(NodePressure, cond)
                if row is None or row.pressure != pressure:
                    changed = True
                    log.info("%s is now %s%s", cond, pressure, f": {text}" if text else "")
                    s.merge(NodePressure(condition=cond, pressure=pressure, detail=text, transition_at=utcnow()))
                elif row.detail != text:
                    row.detail = text
        return changed

    def _held(self, cond: str, now: float) -> bool:
        """Within the transition period after a threshold of cond was last met, so a node
        hovering at a threshold does not flap (the kubelet's evictionPressureTransitionPeriod)."""
        last = self._last_met.get(cond)
        return last is not None and now - last < self.transition_period

    def next_transition_in(self) -> float | None:
        """Seconds until a held condition may end, so the loop wakes in time to clear it."""
        now = self.clock()
        waits = [self.transition_period - (now - last) for last in self._last_met.values()
                 if now - last <= self.transition_period]
        return max(0.0, min(waits)) if waits else None

    async def _record_signals(self, obs: Observations) -> None:
        """The signals for the views. An idle node's figures barely move: they are written when
        one moved by more than RECORD_CHANGE of its capacity, or RECORD_EVERY after the last write."""
        now = self.clock()
        moved = any(abs(o.available - self._recorded.get(name, -1)) > RECORD_CHANGE * o.capacity
                    for name, o in obs.items())
        for name, o in obs.items():
            SIGNAL_AVAILABLE.labels(name).set(o.available)
        if not moved and now - self._recorded_at < RECORD_EVERY:
            return
        self._recorded = {name: o.available for name, o in obs.items()}
        self._recorded_at = now
        limits: dict[tuple[str, bool], tuple[int, str]] = {}
        for t in self.thresholds:
            if t.signal in obs:
                limits[(t.signal, t.hard)] = (self._limit(t, obs), t.written)
        await self.store.run(self._write_signals, obs, limits)

    def _write_signals(self, obs: Observations, limits: dict[tuple[str, bool], tuple[int, str]]) -> None:
        with self.store.session() as s:
            for name, o in obs.items():
                hard, soft = limits.get((name, True), (-1, "")), limits.get((name, False), (-1, ""))
                s.merge(SignalObservation(signal=name, available=o.available, capacity=o.capacity,
                                          hard_threshold=hard[0], hard_written=hard[1], soft_threshold=soft[0],
                                          soft_written=soft[1], updated_at=utcnow()))

    # -- pods -----------------------------------------------------------------------------------

    async def _active_pods(self) -> list[ActivePod]:
        """Pods eviction may act on. Also notes which evicted pods still run: until they are
        gone nothing else is evicted (found from the store, so a restart of this service keeps it),
        and drops the decisions of pods that left the node."""
        desired, evicted, runtime, volumes = await self.store.run(self._read_pods)
        uids = {row.uid for row in desired}
        self._pods.retain(uids)
        out, evicted_running = [], set()
        for row in desired:
            rt = runtime.get(row.uid)
            if not row.admitted or row.deleting or rt is None:
                continue
            ids = {c["name"]: runtime_container_id(c["container_id"]) for c in rt.containers
                   if c.get("state") == "running" and c.get("container_id")}
            if not ids:
                continue
            if row.uid in evicted:
                evicted_running.add(row.uid)
            elif not row.rejection_reason:
                # Ranked by what the node granted (a resize not allocated yet counts for nothing).
                pod = self._pods.get(row.uid, row.manifest)
                if row.allocated is not None:
                    pod = with_allocation(pod, row.allocated)
                out.append(ActivePod(row.uid, pod, row.source, ids, rt.log_dir, volumes.get(row.uid, {})))
        now = self.clock()
        for uid in evicted_running:
            self._waiting_cleanup.setdefault(uid, now)
        for uid in [u for u in self._waiting_cleanup if u not in evicted_running]:
            del self._waiting_cleanup[uid]
        return out

    def _read_pods(self) -> tuple[list[DesiredPod], set[str], dict[str, PodRuntime],
                                  dict[str, dict[str, tuple[int, int]]]]:
        """The node's pods, eviction decisions, runtime rows and emptyDir usage; drops the
        decisions of pods that left the node."""
        with self.store.session() as s:
            desired = list(s.scalars(select(DesiredPod)))
            evicted = set(s.scalars(select(PodEviction.uid)))
            uids = {row.uid for row in desired}
            if evicted - uids:
                s.execute(delete(PodEviction).where(PodEviction.uid.not_in(uids)))
            runtime = {r.uid: r for r in s.scalars(select(PodRuntime))}
            volumes: dict[str, dict[str, tuple[int, int]]] = {}
            for v in s.scalars(select(PodVolume).where(PodVolume.plugin == EMPTY_DIR)):
                volumes.setdefault(v.pod_uid, {})[v.name] = (v.used_bytes, v.size_limit_bytes)
        return desired, evicted, runtime, volumes
