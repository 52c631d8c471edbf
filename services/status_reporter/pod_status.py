"""Computing a pod's v1 PodStatus from what pod-sync observed, as the kubelet does.

Pure functions: desired pod + runtime observation (+ the previous status, for sticky terminal
phases and unchanged transition times) in, PodStatus dict and a one-line "why" out.
"""

from __future__ import annotations

from typing import Any

from shared.model import recursive_read_only, restart_rules
from shared.model.container_id import runtime_container_id
from shared.model.pod_status import (
    ContainerState,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    PodCondition,
    PodStatus,
    VolumeMountStatus,
)
from shared.model.podspec import Container, Pod
from shared.model.probe_state import ProbeState
from shared.model.qos import qos_class
from shared.model.timestamps import rfc3339
from shared.store import node_shutdown as shutdown
from shared.store.observed import ContainerInstance, ObservedContainer

# Waiting reasons that only mean "on its way": not worth explaining to the user.
PROGRESS_REASONS = {"ContainerCreating", "PodInitializing", ""}
REASON_WORDS = {
    "ErrImagePull": "image could not be pulled",
    "ImagePullBackOff": "image could not be pulled (backing off)",
    "ErrImageNeverPull": "image missing and imagePullPolicy is Never",
    "CrashLoopBackOff": "container keeps crashing (backing off)",
    "CreateContainerError": "container could not be created",
    "CreateContainerConfigError": "container config invalid",
    "RunContainerError": "container could not be started",
    "FailedCreatePodSandBox": "sandbox failed",
    "NetworkNotReady": "pod network not ready",
    "PostStartHookError": "postStart hook failed",
    "FailedMount": "volume could not be mounted",
    "FailedAttachVolume": "volume not attached",
    "ContainerCreating": "waiting for volumes",
    "RestartingAllContainers": "restarting with every container of the pod (a RestartAllContainers rule)",
}


def _terminated(inst: ContainerInstance) -> ContainerStateTerminated:
    reason = inst.get("reason") or ("Completed" if inst.get("exit_code") == 0 else "Error")
    out: ContainerStateTerminated = {"exitCode": inst.get("exit_code", 0), "reason": reason}
    # Times and the ID only once the runtime has them, as the kubelet leaves them out.
    if inst.get("started_at") is not None:
        out["startedAt"] = inst["started_at"]
    if inst.get("finished_at") is not None:
        out["finishedAt"] = inst["finished_at"]
    if inst.get("container_id") is not None:
        out["containerID"] = inst["container_id"]
    if inst.get("message"):
        out["message"] = inst["message"]
    return out


def container_status(obs: ObservedContainer, default_waiting: str,
                     probes: dict[str, tuple[str, str]] | None = None,
                     probed: tuple[bool, bool] = (False, False)) -> ContainerStatus:
    """probes: kind -> (container id, result) from the probe service; probed: whether the spec
    has a (readiness, startup) probe. Without a probe, running means ready and started."""
    state = obs.get("state", "")
    waiting_reason = obs.get("waiting_reason", "")
    status: ContainerStatus = {
        "name": obs["name"], "image": obs.get("image", ""), "imageID": obs.get("image_id", ""),
        "restartCount": obs.get("restart_count", 0), "ready": False, "started": False,
        "lastState": {},
    }
    if obs.get("container_id"):
        status["containerID"] = obs["container_id"]
    if obs.get("user"):
        status["user"] = obs["user"]
    # In-place resize: what the node granted and what the container has (pod-sync's resize.py).
    if obs.get("allocated"):
        status["allocatedResources"] = obs["allocated"]
    if "resources" in obs:
        status["resources"] = obs["resources"]
    last = obs.get("last_terminated")
    if waiting_reason and state == "exited":
        # Waiting to restart: the exit just seen becomes lastState.
        status["state"] = {"waiting": {"reason": waiting_reason, "message": obs.get("waiting_message", "")}}
        status["lastState"] = {"terminated": _terminated(obs)}
        return status
    if last:
        status["lastState"] = {"terminated": _terminated(last)}
    if waiting_reason or state in ("", "created"):
        reason = waiting_reason or default_waiting
        waiting: ContainerStateWaiting = {"reason": reason}
        message = obs.get("waiting_message") or (obs.get("image_pull", "") if reason in PROGRESS_REASONS else "")
        if message:
            waiting["message"] = message
        status["state"] = {"waiting": waiting}
    elif state == "running":
        status["state"] = {"running": {"startedAt": obs.get("started_at")}}
        probes = probes or {}
        cid = runtime_container_id(obs.get("container_id", ""))

        def passed(kind: str) -> bool:
            return probes.get(kind) == (cid, ProbeState.SUCCESS)

        has_readiness, has_startup = probed
        status["started"] = passed("startup") if has_startup else True
        status["ready"] = status["started"] and (passed("readiness") if has_readiness else True)
    elif state == "exited":
        status["state"] = {"terminated": _terminated(obs)}
    else:
        status["state"] = {"waiting": {"reason": "ContainerStatusUnknown",
                                       "message": "The container could not be located"}}
    return status


def volume_mount_statuses(c: Container, rro_supported: bool) -> list[VolumeMountStatus]:
    """The container's volumeMounts as the kubelet 1.37 reports them: every mount, whatever the
    container's state, with recursiveReadOnly (Disabled or Enabled) on the read-only ones."""
    out = []
    for m in c.volumeMounts:
        entry: VolumeMountStatus = {"name": m.name, "mountPath": m.mountPath}
        if m.readOnly:
            entry["readOnly"] = True
            entry["recursiveReadOnly"] = recursive_read_only.status_mode(m, rro_supported)
        out.append(entry)
    return out


def pod_phase(pod: Pod, statuses: list[ContainerStatus], init_done: bool) -> str:
    """The kubelet's getPhase for app containers (statuses in spec order): a stopped container
    that runs again by its restart rules and policies (restart_rules.py) keeps the pod Running."""
    if not init_done:
        return "Pending"
    running = waiting = stopped = succeeded = unknown = not_restartable = 0
    for c, st in zip(pod.spec.containers, statuses, strict=True):
        state: ContainerState = st.get("state", {})
        last = st.get("lastState", {}).get("terminated")
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            code = state["terminated"].get("exitCode", 0)
            succeeded += code == 0
            not_restartable += not restart_rules.should_restart(pod, c, code)
        elif "waiting" in state and last is not None:
            stopped += 1
            not_restartable += not _restarts(pod, c, st, last.get("exitCode", 0))
        elif "waiting" in state:
            waiting += 1
        else:
            unknown += 1
    if waiting:
        return "Pending"
    if running and not unknown:
        return "Running"
    if not running and stopped and not unknown:
        if stopped != not_restartable:
            return "Running"  # at least one is on its way back
        return "Succeeded" if stopped == succeeded else "Failed"
    return "Pending"


def _failed_for_good(pod: Pod, init_statuses: list[ContainerStatus]) -> bool:
    """A regular init container failed and does not run again: the pod has failed."""
    for c, st in zip(pod.spec.initContainers, init_statuses, strict=True):
        if c.restartPolicy == "Always":
            continue
        ended = st["state"].get("terminated") or st.get("lastState", {}).get("terminated")
        if "running" in st["state"] or ended is None:
            continue
        code = ended.get("exitCode", 0)
        if code != 0 and not _restarts(pod, c, st, code):
            return True
    return False


def _waits_for_restart_all(st: ContainerStatus) -> bool:
    return st.get("state", {}).get("waiting", {}).get("reason") == restart_rules.RESTARTING_ALL


def _restarts(pod: Pod, c: Container, st: ContainerStatus, exit_code: int) -> bool:
    """The stopped container runs again: by its rules and policies, or because every container
    of the pod is being restarted (RestartAllContainers)."""
    return _waits_for_restart_all(st) or restart_rules.should_restart(pod, c, exit_code)


def _all_containers_restarting(pod: Pod, statuses: list[ContainerStatus], phase: str,
                               previous: dict[str, PodCondition]) -> PodCondition:
    """The kubelet's AllContainersRestarting condition, for a pod with a RestartAllContainers
    rule: True from a container's exit by such a rule until every container runs again."""
    if phase in ("Succeeded", "Failed"):
        cond = _condition("AllContainersRestarting", False, previous)
        cond["reason"] = "PodCompleted" if phase == "Succeeded" else "PodFailed"
        return cond
    specs = pod.spec.initContainers + pod.spec.containers
    restarting = any(
        _waits_for_restart_all(st)
        or ("terminated" in st["state"] and restart_rules.restarts_all(c, st["state"]["terminated"].get("exitCode", 0)))
        for c, st in zip(specs, statuses, strict=True))
    cond = _condition("AllContainersRestarting", restarting, previous)
    if restarting:
        cond["reason"], cond["message"] = "RestartAllContainersStarted", "container exited with restart policy rule"
    return cond


def _condition(ctype: str, ok: bool, previous: dict[str, PodCondition], reason: str = "",
               message: str = "") -> PodCondition:
    status = "True" if ok else "False"
    prev = previous.get(ctype)
    cond: PodCondition = {"type": ctype, "status": status,
            "lastTransitionTime": prev["lastTransitionTime"] if prev and prev.get("status") == status
            else rfc3339(), "lastProbeTime": None}
    if not ok and reason:
        cond["reason"] = reason
        if message:
            cond["message"] = message
    return cond


def rejected_status(pod: Pod, reason: str, message: str, previous: PodStatus | None) -> PodStatus:
    """A pod admission turned away: Failed, with the reason, and nothing ever started."""
    return {"phase": "Failed", "reason": reason, "message": message, "podIP": None, "podIPs": [],
            "startTime": (previous or {}).get("startTime") or rfc3339(), "qosClass": qos_class(pod),
            "conditions": [], "containerStatuses": []}


# A static pod a node shutdown stopped runs again after it (services/pod_sync/syncer.py): its
# Failed phase is the one terminal phase that is not for good.
DISRUPTION_TARGET = "DisruptionTarget"
BY_KUBELET = ("Evicted", shutdown.TERMINATED)


def _runs_again(previous: PodStatus, rejection: tuple[str, str]) -> bool:
    return previous.get("reason") == shutdown.TERMINATED and not rejection[0]


def _incomplete_init(pod: Pod, init_statuses: list[ContainerStatus]) -> list[str]:
    """The init containers the pod still waits for: regular ones must have succeeded, sidecars
    only need to have started. Marks regular ones ready once they exited 0 (as the kubelet's
    prober manager)."""
    for c, st in zip(pod.spec.initContainers, init_statuses, strict=True):
        if c.restartPolicy != "Always":
            st["ready"] = st["state"].get("terminated", {}).get("exitCode") == 0
    return [c.name for c, st in zip(pod.spec.initContainers, init_statuses, strict=True)
            if (c.restartPolicy == "Always" and "waiting" in st["state"]
                and "terminated" not in st.get("lastState", {}))
            or (c.restartPolicy != "Always" and st["state"].get("terminated", {}).get("exitCode") != 0)]


def _phase(pod: Pod, app_statuses: list[ContainerStatus], init_statuses: list[ContainerStatus], init_done: bool,
           previous: PodStatus, rejection: tuple[str, str]) -> str:
    phase = "Failed" if _failed_for_good(pod, init_statuses) else pod_phase(pod, app_statuses, init_done)
    if previous.get("phase") in ("Succeeded", "Failed") and not _runs_again(previous, rejection):
        phase = str(previous["phase"])  # terminal phases are sticky
    return phase


def _could_be_running(runtime: dict[str, Any]) -> bool:
    """A container of the pod runs, or may (the runtime could not say)."""
    return any(c.get("state") in ("running", "unknown") for c in runtime.get("containers", []))


def compute_status(pod: Pod, runtime: dict[str, Any] | None, previous: PodStatus | None,
                   deleting: bool = False, rejection: tuple[str, str] = ("", ""),
                   probes: dict[tuple[str, str], tuple[str, str]] | None = None,
                   rro_supported: bool = False) -> tuple[PodStatus, str]:
    """Return (v1 PodStatus, summary in words). rro_supported: the runtime's default handler
    makes recursive read-only mounts (each read-only mount's recursiveReadOnly in the status)."""
    if rejection[0] and not (runtime or {}).get("containers"):
        return rejected_status(pod, *rejection, previous), f"rejected ({rejection[0]}): {rejection[1]}"
    previous = previous or {}
    runtime = runtime or {}
    observed: dict[str, ObservedContainer] = {c["name"]: c for c in runtime.get("containers", [])}

    def obs(name: str, image: str) -> ObservedContainer:
        # Not created yet: the kubelet still names the spec's image.
        return observed.get(name, {"name": name, "state": "", "image": image})

    probes = probes or {}

    def status_of(c: Container, default_waiting: str) -> ContainerStatus:
        mine = {kind: v for (name, kind), v in probes.items() if name == c.name}
        status = container_status(obs(c.name, c.image), default_waiting, mine,
                                  (c.readinessProbe is not None, c.startupProbe is not None))
        if c.volumeMounts:
            status["volumeMounts"] = volume_mount_statuses(c, rro_supported)
        return status

    # The kubelet's default for every container not created yet: PodInitializing in a pod with
    # init containers (init ones included), ContainerCreating otherwise.
    not_created = "PodInitializing" if pod.spec.initContainers else "ContainerCreating"
    init_statuses = [status_of(c, not_created) for c in pod.spec.initContainers]
    incomplete_init = _incomplete_init(pod, init_statuses)
    init_done = not incomplete_init
    app_statuses = [status_of(c, not_created) for c in pod.spec.containers]
    phase = _phase(pod, app_statuses, init_statuses, init_done, previous, rejection)

    prev_conds = {c["type"]: c for c in previous.get("conditions", [])}
    sidecar_statuses = [st for c, st in zip(pod.spec.initContainers, init_statuses, strict=True) if c.restartPolicy == "Always"]
    unready = [st["name"] for st in sidecar_statuses + app_statuses if not st["ready"]]
    sandbox_ok = bool(runtime.get("sandbox_ready"))
    conditions = [
        _condition("PodReadyToStartContainers", sandbox_ok, prev_conds),
        _condition("Initialized", init_done, prev_conds, "ContainersNotInitialized",
                   f"containers with incomplete status: [{' '.join(incomplete_init)}]"),
        _condition("Ready", not unready and phase == "Running", prev_conds, "ContainersNotReady",
                   f"containers with unready status: [{' '.join(unready)}]"),
        _condition("ContainersReady", not unready and phase == "Running", prev_conds, "ContainersNotReady",
                   f"containers with unready status: [{' '.join(unready)}]"),
        _condition("PodScheduled", True, prev_conds),
        *runtime.get("resize_conditions", []),
    ]
    if restart_rules.could_restart_all(pod):
        conditions.append(_all_containers_restarting(pod, init_statuses + app_statuses, phase, prev_conds))
    pod_ip = runtime.get("pod_ip", "")
    status: PodStatus = {
        "phase": phase,
        "conditions": conditions,
        "podIP": pod_ip or None,
        "podIPs": [{"ip": pod_ip}] if pod_ip else [],
        "startTime": previous.get("startTime") or rfc3339(),
        "qosClass": qos_class(pod),
        "containerStatuses": app_statuses,
    }
    if runtime.get("observed_generation") is not None:
        status["observedGeneration"] = runtime["observed_generation"]
    _pod_level_resources(status, runtime.get("pod_resources") or {})
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    if pod.spec.ephemeralContainers:
        # Never probed: not ready, and no `started` (the kubelet's prober leaves them out).
        ephemeral = [status_of(c, not_created) for c in pod.spec.ephemeralContainers]
        for st in ephemeral:
            st["ready"] = False
            st.pop("started", None)
        status["ephemeralContainerStatuses"] = sorted(ephemeral, key=lambda st: st["name"])
    if rejection[0]:
        if rejection[0] in BY_KUBELET:
            # Evicted or stopped for a node shutdown: the kubelet says it disrupted the pod.
            prev = prev_conds.get(DISRUPTION_TARGET)
            status["conditions"].append({
                "type": DISRUPTION_TARGET, "status": "True", "reason": "TerminationByKubelet", "message": rejection[1],
                "lastTransitionTime": prev["lastTransitionTime"] if prev else rfc3339(), "lastProbeTime": None})
        if _could_be_running(runtime) and previous.get("phase") not in ("Succeeded", "Failed"):
            # As the kubelet's status manager: no terminal phase while a container may still
            # run (a pod stopping within its grace period holds what it holds until it is gone).
            return status, f"stopping ({rejection[0]}): {rejection[1]}".rstrip()
        # Failed after it ran (activeDeadlineSeconds): its containers' statuses stay.
        status["phase"], status["reason"], status["message"] = "Failed", rejection[0], rejection[1]
        for cond in status["conditions"]:
            if cond["type"] in ("Ready", "ContainersReady") and cond["status"] == "True":
                cond.update(_condition(cond["type"], False, {}, "PodFailed", ""))
        return status, f"{rejection[0]}: {rejection[1]}"
    return status, summarize(status, runtime, deleting)


def _pod_level_resources(status: PodStatus, recorded: dict[str, Any]) -> None:
    """The pod-level resources as pod-sync recorded them (services/pod_sync/pod_resources_status.py)."""
    if recorded.get("allocatedResources"):
        status["allocatedResources"] = recorded["allocatedResources"]
    if "resources" in recorded:
        status["resources"] = recorded["resources"]


def summarize(status: PodStatus, runtime: dict[str, Any], deleting: bool) -> str:
    """Why the pod is not running as asked, in words; empty when it is."""
    if deleting:
        return "Terminating: stopping containers within the grace period"
    reason = runtime.get("sync_error_reason", "")
    if reason:
        words = REASON_WORDS.get(reason, reason)
        return f"{words}: {runtime.get('sync_error_message', '')}".rstrip(": ")
    problems = []
    for st in status.get("initContainerStatuses", []) + status["containerStatuses"]:
        waiting = st["state"].get("waiting")
        if waiting and waiting.get("reason") not in PROGRESS_REASONS:
            words = REASON_WORDS.get(waiting["reason"], waiting["reason"])
            problems.append(f"container {st['name']}: {words}: {waiting.get('message', '')}".rstrip(": "))
        term = st["state"].get("terminated")
        if term and term.get("exitCode") and status["phase"] == "Failed":
            problems.append(f"container {st['name']} exited with code {term['exitCode']} ({term.get('reason')})")
    if status["phase"] == "Running":
        for st in status["containerStatuses"]:
            if "running" in st["state"] and not st["ready"]:
                problems.append(f"container {st['name']} is running but not ready"
                                + ("" if st["started"] else " (startup probe has not passed yet)"))
    if problems:
        return "; ".join(problems)
    if status["phase"] == "Pending":
        starting = [st["name"] for st in status["containerStatuses"] if "waiting" in st["state"]]
        if not runtime:
            return "waiting for pod-sync to start the pod"
        if starting:
            return f"starting: waiting for {', '.join(starting)}"
    return ""


def with_host_ips(status: PodStatus, host_ip: str) -> PodStatus:
    """hostIP and, since 1.28, hostIPs: the node's addresses a pod's status names (one here:
    pykubelet's node IP is a single address)."""
    return {**status, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}] if host_ip else []}
