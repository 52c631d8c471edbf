"""The node's pressure as people read it: each eviction signal with its thresholds and headroom,
the pressure conditions, the last evictions, the last disk reclaim and the last node shutdown.
One reader of the eviction service's tables for its admin view and for `pykubelet status`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from shared.config.thresholds import SIGNAL_RESOURCES
from shared.model.timestamps import rfc3339
from shared.store import DiskReclaim, NodePressure, NodeShutdown, PodEviction, SignalObservation, Store
from shared.store.node_shutdown import shutting_down

BYTE_SIGNALS = frozenset(s for s, r in SIGNAL_RESOURCES.items() if r in ("memory", "ephemeral-storage"))


def _iso(ts: datetime | None) -> str | None:
    return rfc3339(ts) if ts is not None else None


def _signal(o: SignalObservation) -> dict[str, Any]:
    out: dict[str, Any] = {"signal": o.signal, "available": o.available, "capacity": o.capacity}
    for kind, limit, written in (("hard", o.hard_threshold, o.hard_written), ("soft", o.soft_threshold, o.soft_written)):
        if limit >= 0:
            out[kind] = {"threshold": written, "thresholdValue": limit, "headroom": o.available - limit,
                         "met": o.available < limit}
    return out


def pressure_report(store: Store, evictions: int = 20) -> dict[str, Any]:
    with store.session() as s:
        signals = list(s.scalars(select(SignalObservation).order_by(SignalObservation.signal)))
        conditions = list(s.scalars(select(NodePressure).order_by(NodePressure.condition)))
        recent = list(s.scalars(select(PodEviction).order_by(PodEviction.decided_at.desc()).limit(evictions)))
        reclaim = s.get(DiskReclaim, 1)
        shutdown = s.get(NodeShutdown, 1)
        going_down = shutting_down(s)
    return {
        "signals": [_signal(o) for o in signals],
        "conditions": [{"type": c.condition, "status": c.pressure, "detail": c.detail,
                        "since": _iso(c.transition_at)} for c in conditions],
        "evictions": [{"pod": f"{e.namespace}/{e.name}", "uid": e.uid, "signal": e.signal,
                       "reason": e.reason, "message": e.message, "at": _iso(e.decided_at)} for e in recent],
        "lastReclaim": None if reclaim is None else {
            "trigger": reclaim.trigger, "imagesRemoved": reclaim.images_removed,
            "containersRemoved": reclaim.containers_removed, "bytesFreed": reclaim.bytes_freed,
            "error": reclaim.error, "at": _iso(reclaim.finished_at)},
        # The last graceful node shutdown (shutdownGracePeriod); one of an earlier boot is over.
        "shutdown": None if shutdown is None else {
            "inProgress": going_down,
            "startedAt": _iso(shutdown.started_at), "podsStoppedAt": _iso(shutdown.ended_at)},
    }


def human(n: int, signal: str) -> str:
    if signal not in BYTE_SIGNALS:
        return str(n)
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{n}B"
