"""The container runtime's status as pod-sync last recorded it (the node_health row): one check
of the runtime for the whole node, as the kubelet makes one, read by the network service and
status-reporter."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from shared.store import NodeHealth, Store

# pod-sync rewrites the row at least every 10 s while it runs; older than this, it is not running.
STALE_AFTER = 30.0


def recorded_age(updated_at: datetime) -> float:
    """Seconds since the node_health row was written (SQLite gives its UTC time back naive)."""
    return time.time() - updated_at.replace(tzinfo=timezone.utc).timestamp()


def runtime_network(store: Store) -> tuple[bool, str]:
    """The runtime's NetworkReady condition: (ready, "ok" or why not)."""
    h = store.read_row(NodeHealth, {"id": 1})
    if h is None:
        return False, "pod-sync has not reported the container runtime's status yet"
    age = recorded_age(h["updated_at"])
    if age > STALE_AFTER:
        return False, f"pod-sync has not reported the container runtime's status for {age:.0f}s"
    return h["network_ready"], "ok" if h["network_ready"] else h["network_message"]
