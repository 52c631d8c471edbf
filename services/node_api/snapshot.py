"""One gathering of node and pod stats, rendered three ways (summary JSON, /metrics/resource,
/metrics/cadvisor).

`summary` has the Summary API's shape and field names, but every `time`/`startTime` is a float
(seconds since the epoch) so the metrics keep sub-second sample times; `summary_json` turns
them into the API's RFC 3339 strings. The other fields carry what only cAdvisor's labels need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.model.timestamps import api_time

TIME_KEYS = frozenset({"time", "startTime"})


@dataclass(frozen=True)
class ContainerIds:
    id: str  # runtime container id
    image: str
    cgroup: str  # cAdvisor's id label: the container's cgroup name


@dataclass(frozen=True)
class PodIds:
    sandbox_id: str
    cgroup: str


@dataclass
class Snapshot:
    time: float
    summary: dict[str, Any]
    pods: dict[str, PodIds] = field(default_factory=dict)  # by pod uid
    containers: dict[tuple[str, str], ContainerIds] = field(default_factory=dict)  # (pod uid, name)
    node_fs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (device, FsStats)
    image_device: str = ""  # the device holding the image filesystem (containers' writable layers)
    kubepods: str = "/kubepods"  # the pods' cgroup on this host, cAdvisor's id of the "pods" container


def rfc3339(ts: float | None) -> str | None:
    """metav1.Time as JSON: whole seconds, UTC; the zero time is null."""
    return api_time(ts)


def summary_json(value: Any) -> Any:
    """A copy of the summary with its float times as RFC 3339 strings."""
    if isinstance(value, dict):
        return {k: rfc3339(v) if k in TIME_KEYS else summary_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [summary_json(v) for v in value]
    return value
