"""Whether what the store holds is current: each service's liveness and reconcile marks.

A row in the store outlives the service that wrote it: a stopped node leaves its last pod
phases and IPs behind, and a freshly started service has not yet replaced what the previous run
wrote. Each service therefore keeps its own `service_state` row (started, heartbeat, reconciled),
and readers judge a table current only while its owner is alive and has reconciled since it
started.
"""

from __future__ import annotations

import functools
import logging
import os
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy.exc import DatabaseError

from shared.store import ServiceState, Store

log = logging.getLogger(__name__)

HEARTBEAT_PERIOD = 10.0
# A reconcile is written at once unless one was written this recently: the heartbeat carries the
# latest one, so a service reconciling every few seconds adds no commits of its own.
SYNC_WRITE_INTERVAL = 2 * HEARTBEAT_PERIOD
# A service not heard from for three heartbeats is taken as down (killed, stopped, hung).
STALE_AFTER = 3 * HEARTBEAT_PERIOD


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _aware(t: datetime | None) -> datetime | None:
    # SQLite hands datetimes back without their zone; they were written in UTC.
    return t.replace(tzinfo=timezone.utc) if t is not None and t.tzinfo is None else t


class ServiceStateWriter:
    """One service's own row. Reconciles are written as they happen (readers wait for them),
    at most one per SYNC_WRITE_INTERVAL: a service reconciling every second costs no more."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self._synced_at: datetime | None = None
        self._written_sync: datetime | None = None
        self._reconciled = False

    def started(self) -> None:
        now = _now()
        self.store.upsert(ServiceState, {"name": self.name}, {
            "pid": os.getpid(), "started_at": now, "heartbeat_at": now, "reconciled_at": None, "synced_at": None,
            "stopped_at": None})

    def synced(self) -> Future[None] | None:
        """The service's tables match their sources now (a full reconcile finished). The write
        is queued on the store's thread (a wait for the store's lock must not hold the loop that
        calls this); returned, for a caller that needs it done, when there is one. It never
        raises: a store that cannot be written (a full disk) is the heartbeat's to report, and
        the reconcile is recorded on a later call."""
        now = self._synced_at = _now()
        if not self._reconciled:
            fields = {"reconciled_at": now, "synced_at": now}
            self._reconciled = True
        elif self._written_sync is None or (now - self._written_sync).total_seconds() >= SYNC_WRITE_INTERVAL:
            fields = {"synced_at": now, "heartbeat_at": now}
            self._written_sync = now  # one write per interval, however long this one waits
        else:
            return None
        return self.store.submit(self._write_sync, fields)

    def _write_sync(self, fields: dict[str, datetime | None]) -> None:
        try:
            self._write(**fields)
        except DatabaseError as exc:
            log.debug("could not record the reconcile: %s", exc)
            if "reconciled_at" in fields:
                self._reconciled = False  # recorded on the next call instead

    @property
    def reconciled(self) -> bool:
        return self._reconciled

    async def heartbeat(self) -> None:
        # On the store's thread: a heartbeat landing on another service's write waits out its lock.
        await self.store.run(functools.partial(self._write, heartbeat_at=_now(), synced_at=self._synced_at))

    def stopped(self) -> None:
        self._write(stopped_at=_now())

    def _write(self, **fields: datetime | None) -> None:
        # A missing row (the store was rebuilt under a running service) is written anew.
        self.store.upsert(ServiceState, {"name": self.name}, fields, insert={"pid": os.getpid(), "started_at": _now()})
        if fields.get("synced_at") is not None:
            self._written_sync = fields["synced_at"]


@dataclass(frozen=True)
class ServiceView:
    name: str
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    reconciled_at: datetime | None = None
    synced_at: datetime | None = None
    stopped_at: datetime | None = None

    def alive(self, now: datetime) -> bool:
        return (self.heartbeat_at is not None and self.stopped_at is None
                and (now - self.heartbeat_at).total_seconds() < STALE_AFTER)


def read_states(store: Store) -> dict[str, ServiceView]:
    return {r["name"]: ServiceView(r["name"], _aware(r["started_at"]), _aware(r["heartbeat_at"]),
                                   _aware(r["reconciled_at"]), _aware(r["synced_at"]), _aware(r["stopped_at"]))
            for r in store.read_rows(ServiceState)}


# What each service's views are made of besides its own tables, producers first.
VIEW_INPUTS: dict[str, list[str]] = {
    "status-reporter": ["pod-sync"],
    "node-api": ["pod-sync", "status-reporter"],
    "eviction": ["pod-sync"],
}


def owners_of(service: str) -> list[str]:
    """Whose reconciles make what this service shows current: its inputs, then itself."""
    return [*VIEW_INPUTS.get(service, []), service]


def view_freshness(store: Store, service: str) -> list[str]:
    """Why a service's admin views may not be current (empty when they are)."""
    return not_current(read_states(store), owners_of(service), _now())


def ago(t: datetime, now: datetime) -> str:
    s = max(0, int((now - t).total_seconds()))
    if s < 120:
        return f"{s}s ago"
    if s < 7200:
        return f"{s // 60}m ago"
    return f"{s // 3600}h{s % 3600 // 60:02d}m ago"


def at(t: datetime) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class NodeView:
    running: bool
    last_heard: datetime | None  # the newest heartbeat of any service
    stopped_at: datetime | None  # set when every service stopped cleanly

    def describe(self, now: datetime) -> str:
        if self.running:
            return "running"
        if self.last_heard is None:
            return "not running (no service has run from this root dir)"
        if self.stopped_at is not None:
            return f"not running (stopped at {at(self.stopped_at)}, {ago(self.stopped_at, now)})"
        return f"not running (last heard from at {at(self.last_heard)}, {ago(self.last_heard, now)})"


def node_view(states: dict[str, ServiceView], now: datetime) -> NodeView:
    beats = [v.heartbeat_at for v in states.values() if v.heartbeat_at is not None]
    stops = [v.stopped_at for v in states.values() if v.stopped_at is not None]
    clean_stop = max(stops) if stops and len(stops) == len(states) else None
    return NodeView(running=any(v.alive(now) for v in states.values()),
                    last_heard=max(beats) if beats else None, stopped_at=clean_stop)


def not_current(states: dict[str, ServiceView], owners: list[str], now: datetime) -> list[str]:
    """Why rows written by `owners` (in order: producers before the services deriving from
    them) may not be current; empty when they are."""
    reasons = []
    for name in owners:
        v = states.get(name)
        if v is None or v.started_at is None:
            reasons.append(f"{name} has not run from this root dir")
        elif v.stopped_at is not None:
            reasons.append(f"{name} stopped at {at(v.stopped_at)} ({ago(v.stopped_at, now)})")
        elif not v.alive(now):
            last = v.heartbeat_at or v.started_at
            reasons.append(f"{name} is not responding (last heard from {ago(last, now)})")
        elif v.reconciled_at is None:
            reasons.append(f"{name} has not reconciled yet (started {ago(v.started_at, now)})")
    if reasons:
        return reasons
    # A service deriving its rows from another's is current once it synced after that one
    # reconciled: pod status computed from a previous run's runtime rows is not.
    for producer, consumer in zip(owners, owners[1:], strict=False):
        p, c = states[producer], states[consumer]
        if p.reconciled_at and (c.synced_at is None or c.synced_at < p.reconciled_at):
            reasons.append(f"{consumer} has not caught up with {producer} since it reconciled "
                           f"({ago(p.reconciled_at, now)})")
    return reasons
