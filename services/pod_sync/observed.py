"""What pod-sync records about a pod for others to read: pod_runtime.containers, one entry per
spec container in the shape shared/store/observed.py gives (probe, status-reporter, eviction and
node-api read it by the same type)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from services.pod_sync.runtime_view import ContainerInfo, RuntimePod
from shared.model.container_id import api_container_id
from shared.model.podspec import Pod
from shared.model.restart_rules import RESTARTING_ALL
from shared.model.timestamps import api_time
from shared.store.observed import ContainerInstance, ObservedContainer

if TYPE_CHECKING:
    from services.pod_sync.resizer import ResizeState


def _instance(c: ContainerInfo, log_dir: str, kill_reasons: dict[str, str]) -> ContainerInstance:
    message = c.message or kill_reasons.get(c.id, "")
    instance: ContainerInstance = {
        "container_id": api_container_id(c.id),
        "state": c.state,
        "restart_count": c.attempt,
        "started_at": api_time(c.started_at),
        "finished_at": api_time(c.finished_at),
        "exit_code": c.exit_code,
        "reason": c.reason,
        "message": message,
        "image": c.image,
        "image_id": c.image_ref,
        "log_path": f"{log_dir}/{c.log_path}" if c.log_path and not c.log_path.startswith("/") else c.log_path,
    }
    if c.user is not None:
        instance["user"] = c.user
    return instance


def _resources(entry: ObservedContainer, resize: ResizeState, name: str, latest: ContainerInfo | None) -> None:
    allocated = resize.allocated[name]
    has = (resize.applied(latest) if latest is not None and latest.state == "running" else None) or allocated
    if allocated.get("requests"):
        entry["allocated"] = dict(allocated["requests"])
    # What it was given includes the pod-level limits it takes as its own (allocation.effective);
    # its status, as the kubelet's, shows only the limits the container itself sets.
    own_limits = allocated.get("limits") or {}
    shown = {"requests": has.get("requests") or {},
             "limits": {k: v for k, v in (has.get("limits") or {}).items() if k in own_limits}}
    # Always there, {} for a container without resources, as the kubelet reports it: the API
    # server takes a resize only for a pod whose running container shows its resources.
    entry["resources"] = {kind: dict(shown[kind]) for kind in ("limits", "requests") if shown[kind]}


def observed_containers(pod: Pod, rt: RuntimePod, waiting: dict[str, tuple[str, str]], log_dir: str,
                        kill_reasons: dict[str, str], pull_notes: dict[str, str],
                        resize: ResizeState | None = None,
                        restarted_all_at: float | None = None) -> list[ObservedContainer]:
    """restarted_all_at: when every container was stopped for a RestartAllContainers rule; one
    that has not run since waits to run again (RestartingAllContainers)."""
    out: list[ObservedContainer] = []
    resettable = {c.name for c in pod.spec.initContainers + pod.spec.containers}  # not ephemeral ones
    specs = ([(c, True) for c in pod.spec.initContainers] + [(c, False) for c in pod.spec.containers]
             + [(c, False) for c in pod.spec.ephemeralContainers])
    for spec, init in specs:
        history = rt.history(spec.name)
        entry: ObservedContainer = {"name": spec.name, "init": init, "image": spec.image, "state": "",
                                 "restart_count": 0, "last_terminated": None,
                                 "sidecar": init and spec.restartPolicy == "Always",
                                 "image_pull": pull_notes.get(spec.name, "")}
        if history:
            # An instance's fields are a part of the entry's (ContainerInstance is its base).
            entry.update(cast(ObservedContainer, _instance(history[0], log_dir, kill_reasons)))
            entry["image"] = spec.image
            previous = next((h for h in history[1:] if h.state == "exited"), None)
            if previous is not None:
                entry["last_terminated"] = _instance(previous, log_dir, kill_reasons)
        reason, message = waiting.get(spec.name, ("", ""))
        if (not reason and restarted_all_at is not None and spec.name in resettable and history
                and history[0].state == "exited" and history[0].created_at < restarted_all_at):
            reason, message = RESTARTING_ALL, "stopped to restart all containers of the pod; it runs again in its turn"
        entry["waiting_reason"] = reason
        entry["waiting_message"] = message
        if resize is not None and spec.name in resize.allocated:
            _resources(entry, resize, spec.name, history[0] if history else None)
        out.append(entry)
    return out
