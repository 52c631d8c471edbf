"""The container runtime's status as pod-sync last recorded it (the node_health row): one check
of the runtime for the whole node, as the kubelet makes one, read by the network service and
status-reporter."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

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


def _json(text: str | None, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


def default_handler_makes_rro_mounts(health: NodeHealth | None) -> bool:
    """Whether the runtime's default handler makes recursive read-only mounts, as pod-sync last
    recorded its handlers (the Node's status.runtimeHandlers; anything unexpected reads as no)."""
    handlers = _json(health.runtime_handlers if health else None, [])
    if not isinstance(handlers, list):
        return False
    default = next((h for h in handlers if isinstance(h, dict) and h.get("name") == ""), None)
    features = default.get("features") if default else None
    return isinstance(features, dict) and features.get("recursiveReadOnlyMounts") is True


def runtime_keeps_groups_strict(health: NodeHealth | None) -> bool:
    """Whether the runtime applies supplementalGroupsPolicy Strict (the Node's
    status.features.supplementalGroupsPolicy; a runtime that reports no features cannot)."""
    features = _json(health.runtime_features if health else None, {})
    return isinstance(features, dict) and features.get("supplementalGroupsPolicy") is True
