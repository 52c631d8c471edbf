"""What to do to bring one pod's runtime state to its spec: a pure function, no I/O.

Follows the kubelet's computePodActions: a missing or dead sandbox means a fresh sandbox and all
containers again; init containers run one at a time, in order, before app containers; exited
containers are restarted per their restart rules and policies (shared/model/restart_rules.py),
behind a crash-loop back-off; ephemeral containers
start once in a ready sandbox and never again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.pod_sync.runtime_view import ContainerInfo, RuntimePod, SandboxInfo
from shared.model import restart_rules
from shared.model.podspec import Container, Pod
from shared.runtime.cri import labels as L
from shared.tasks.retry import Backoff


@dataclass
class StartContainer:
    spec: Container
    attempt: int
    init: bool = False
    ephemeral: bool = False


@dataclass
class PodActions:
    kill_sandboxes: list[str] = field(default_factory=list)
    create_sandbox: bool = False
    sandbox_attempt: int = 0
    start: list[StartContainer] = field(default_factory=list)
    remove_containers: list[str] = field(default_factory=list)
    # Running containers whose spec changed (a new image): killed, then started again.
    kill_containers: list[tuple[ContainerInfo, Container]] = field(default_factory=list)
    # container name -> (reason, message) for containers deliberately not started now
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The pod is finished (nothing will run again): its sandbox can be stopped.
    pod_done: bool = False
    # A container exited by a RestartAllContainers rule: stop every container of the sandbox
    # (these, in this order), then start them all again from the first init container.
    restart_all: list[ContainerInfo] = field(default_factory=list)

    @property
    def noop(self) -> bool:
        return not (self.kill_sandboxes or self.create_sandbox or self.start or self.remove_containers
                    or self.kill_containers or self.restart_all)


def backoff_key(pod: Pod, spec: Container) -> str:
    """A container's crash back-off is kept per image, as the kubelet keys it by the hash of the
    container's name and image: a new image starts without back-off."""
    return f"{backoff_prefix(pod, spec.name)}{L.container_hash(spec.image)}"


def backoff_prefix(pod: Pod, name: str) -> str:
    """What every back-off key of this container starts with, whatever its image."""
    return f"{pod.uid}/{name}/"


def should_restart(pod: Pod, spec: Container, c: ContainerInfo | None) -> bool:
    """The kubelet's ShouldContainerBeRestarted: one never run, created or unknown starts; an
    exited one by its restart rules and policies (restart_rules.py)."""
    if c is None or c.state in ("created", "unknown"):
        return True
    if c.state == "running":
        return False
    return restart_rules.should_restart(pod, spec, c.exit_code)


def definition_changed(c: ContainerInfo, spec: Container) -> bool:
    """A running container created from another image than the spec names now. Containers
    without the annotation (created before it existed) are taken as unchanged."""
    recorded = c.annotations.get(L.CONTAINER_HASH)
    return bool(recorded) and recorded != L.container_hash(spec.image)


def _succeeded(rt: RuntimePod, spec: Container) -> bool:
    c = rt.latest(spec.name)
    return c is not None and c.state == "exited" and c.exit_code == 0


def _next_attempt(rt: RuntimePod, name: str) -> int:
    latest = rt.latest(name)
    return latest.attempt + 1 if latest else 0


# A container that ran this long before exiting starts its back-off over (kubelet 1.32+).
BACKOFF_RESET_AFTER_RUNNING = 600.0


def _restart_or_wait(pod: Pod, spec: Container, c: ContainerInfo, init: bool, backoff: Backoff,
                     actions: PodActions) -> None:
    key = backoff_key(pod, spec)
    if c.started_at and c.finished_at - c.started_at >= BACKOFF_RESET_AFTER_RUNNING:
        backoff.forget(key)
    remaining = backoff.remaining(key, c.finished_at)
    if remaining > 0:
        delay = backoff.current(key)
        actions.waiting[spec.name] = (
            "CrashLoopBackOff",
            f"back-off {delay:g}s restarting failed container={spec.name} pod={pod.metadata.name}"
            f"_{pod.metadata.namespace}({pod.uid})")
        return
    backoff.next(key, c.finished_at)
    if c.state == "created":
        actions.remove_containers.append(c.id)
    actions.start.append(StartContainer(spec, c.attempt + 1, init))


def compute_pod_actions(pod: Pod, rt: RuntimePod, backoff: Backoff, restarted_all_at: float | None = None) -> PodActions:
    """restarted_all_at: when every container was last stopped for a RestartAllContainers rule;
    the containers created before then have run, and are to run again."""
    sandbox = rt.current_sandbox
    if sandbox is None or not sandbox.ready:
        return _new_sandbox(pod, rt, sandbox)
    actions = PodActions()
    # Older ready sandboxes of the same pod are leftovers: stop them.
    actions.kill_sandboxes = [s.id for s in rt.sandboxes[1:] if s.ready]
    in_sandbox = RuntimePod(uid=rt.uid, sandboxes=[sandbox], containers=[
        c for c in rt.containers if c.sandbox_id == sandbox.id
        and (restarted_all_at is None or c.created_at >= restarted_all_at)])
    actions.restart_all = _restart_all(pod, in_sandbox)
    if actions.restart_all:
        return actions

    # Ephemeral containers start once, whatever the init containers are doing, and are never
    # restarted: one the runtime has (in any state) is left as it is (the kubelet's rule).
    for eph in pod.spec.ephemeralContainers:
        if rt.latest(eph.name) is None:
            actions.start.append(StartContainer(eph, 0, ephemeral=True))
    if _init_containers_done(pod, rt, in_sandbox, sandbox.id, backoff, actions):
        _app_containers(pod, rt, in_sandbox, sandbox.id, backoff, actions)
    return actions


def _restart_all(pod: Pod, in_sandbox: RuntimePod) -> list[ContainerInfo]:
    """When an init or app container's last run exited by a RestartAllContainers rule: every
    container of the sandbox that is not ephemeral, in the kubelet's order (app containers, then
    init containers, then those that exited by such a rule); [] otherwise."""
    specs = pod.spec.initContainers + pod.spec.containers
    sources = [c for spec in specs if (c := in_sandbox.latest(spec.name)) is not None
               and c.state == "exited" and restart_rules.restarts_all(spec, c.exit_code)]
    if not sources:
        return []
    source_ids = {c.id for c in sources}
    names = {spec.name for spec in specs}
    apps = {spec.name for spec in pod.spec.containers}
    targets = [c for c in in_sandbox.containers if c.name in names and c.id not in source_ids]
    return ([c for c in targets if c.name in apps] + [c for c in targets if c.name not in apps]
            + [c for c in sources if c.name in apps] + [c for c in sources if c.name not in apps])


def _new_sandbox(pod: Pod, rt: RuntimePod, sandbox: SandboxInfo | None) -> PodActions:
    """No ready sandbox: a new one with the first container(s), unless the pod is done."""
    actions = PodActions()
    actions.kill_sandboxes = [s.id for s in rt.sandboxes if s.ready]
    # A finished pod does not come back: restartPolicy Never, or every container one that runs
    # once (OnFailure, its own or the pod's) and has succeeded.
    if rt.containers and (pod.spec.restartPolicy == "Never" or all(
            restart_rules.runs_once(pod, c) and _succeeded(rt, c) for c in pod.spec.containers)):
        actions.pod_done = True
        return actions
    actions.create_sandbox = True
    actions.sandbox_attempt = sandbox.attempt + 1 if sandbox else 0
    # A container that runs once and has succeeded does not run again in the new sandbox.
    first = pod.spec.initContainers[:1] or [c for c in pod.spec.containers
                                            if not (restart_rules.runs_once(pod, c) and _succeeded(rt, c))]
    init = bool(pod.spec.initContainers)
    actions.start = [StartContainer(c, _next_attempt(rt, c.name), init) for c in first]
    return actions


def _init_containers_done(pod: Pod, rt: RuntimePod, in_sandbox: RuntimePod, sandbox_id: str, backoff: Backoff,
                          actions: PodActions) -> bool:
    """Start, restart or wait for the init containers in order; True once the app containers may go."""
    for spec in pod.spec.initContainers:
        c = in_sandbox.latest(spec.name)
        sidecar = spec.restartPolicy == "Always"
        if c is None:
            actions.start.append(StartContainer(spec, _next_attempt(rt, spec.name), True))
            return False
        if c.state == "running":
            if sidecar:
                continue  # started: the next init container may go
            return False
        if sidecar:
            # A sidecar that stopped is restarted whatever the pod's restartPolicy; once it has
            # run it does not hold up the containers after it.
            _restart_or_wait(pod, spec, c, True, backoff, actions)
            continue
        if c.state == "exited" and c.exit_code == 0:
            continue
        if c.state == "exited" and not restart_rules.should_restart(pod, spec, c.exit_code):
            actions.pod_done = True  # a failed init container that does not run again fails the pod
            actions.kill_sandboxes.append(sandbox_id)
            return False
        _restart_or_wait(pod, spec, c, True, backoff, actions)
        return False
    return True


def _app_containers(pod: Pod, rt: RuntimePod, in_sandbox: RuntimePod, sandbox_id: str, backoff: Backoff,
                    actions: PodActions) -> None:
    """Start what is missing, replace what changed, restart per restartPolicy; a pod whose
    containers are all done is done."""
    done = 0
    for spec in pod.spec.containers:
        c = in_sandbox.latest(spec.name)
        if c is None:
            actions.start.append(StartContainer(spec, _next_attempt(rt, spec.name)))
            continue
        if c.state == "running" and definition_changed(c, spec):
            actions.kill_containers.append((c, spec))
            actions.start.append(StartContainer(spec, c.attempt + 1))
            continue
        if not should_restart(pod, spec, c):
            if c.state == "exited":
                done += 1
            continue
        _restart_or_wait(pod, spec, c, False, backoff, actions)
    if done == len(pod.spec.containers):
        actions.pod_done = True
        actions.kill_sandboxes.append(sandbox_id)
