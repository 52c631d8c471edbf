"""The shape of pod_runtime.containers: what pod-sync records of each spec container
(services/pod_sync/observed.py writes it) and probe, status-reporter, eviction and node-api read.

One entry per spec container, init containers first. Times are RFC 3339 strings, as the API
shows them. The fields of an instance are absent until the container was created once."""

from __future__ import annotations

from typing import Any, TypedDict


class ContainerInstance(TypedDict, total=False):
    """One instance (CRI attempt) of a container."""

    container_id: str      # containerd://<id> (shared/model/container_id.py)
    state: str             # running, exited, created, unknown; "" for none yet
    restart_count: int     # the CRI attempt number
    started_at: str | None
    finished_at: str | None
    exit_code: int
    reason: str
    message: str
    image: str
    image_id: str
    log_path: str
    user: dict[str, dict[str, Any]]   # what the runtime says the process runs as: {"linux": {uid, gid, ...}}


class ObservedContainer(ContainerInstance, total=False):
    """A spec container: its latest instance's fields, then what pod-sync knows beside them."""

    name: str
    init: bool
    sidecar: bool                                   # an init container with restartPolicy Always
    last_terminated: ContainerInstance | None       # the instance before, if it exited
    image_pull: str                                 # pulling, pulled in N s, already present
    waiting_reason: str
    waiting_message: str
    allocated: dict[str, str]                       # the requests the node granted (resize)
    resources: dict[str, dict[str, str]]            # what the running container has: limits, requests
