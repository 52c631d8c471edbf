"""In-place pod resize, the actions: grant a resize that fits, restart or update the running
containers to their allocation, and keep the PodResizePending / PodResizeInProgress state.

The state lives on the pod's DesiredPod row (allocated, actuated, resize), so a restart of
pod-sync neither forgets a grant nor repeats an update it already made. What a container was
created with is on the container itself (its resources annotation), so only updates are stored.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from services.pod_sync import pod_cgroup
from services.pod_sync.actions import backoff_key
from services.pod_sync.cpu_manager import CPUManager
from services.pod_sync.killing import Killer
from services.pod_sync.resize import (
    DEFERRED,
    ERROR,
    IN_PROGRESS_CONDITION,
    PENDING_CONDITION,
    MemoryLimitChange,
    condition,
    created_with,
    decide,
    event_message,
    memory_limits_below_usage,
    needs_restart,
)
from services.pod_sync.resources import pod_cgroup_parent
from services.pod_sync.runtime_config import NodeFacts, linux_resources
from services.pod_sync.runtime_view import ContainerInfo, RuntimePod
from services.pod_sync.swap import swap_blocks_resize
from shared.host.cgroups import CgroupReader
from shared.model.allocation import (
    POD_LEVEL,
    Allocation,
    Resources,
    changed,
    effective,
    quantity_of,
    same,
    spec_allocation,
    with_allocation,
)
from shared.model.pod_status import PodCondition
from shared.model.podspec import Container, Pod
from shared.model.qos import qos_class
from shared.model.timestamps import rfc3339
from shared.runtime.cri import CRIError, RuntimeService
from shared.runtime.cri import labels as L
from shared.store import DesiredPod
from shared.store.models import ResizeCondition
from shared.tasks.retry import Backoff

log = logging.getLogger(__name__)

# A deferred resize is tried again this often even when nothing wakes the pod (the kubelet
# retries on every pod change and on a ticker).
DEFERRED_RETRY = 10.0

Event = Callable[[Pod, str, str, str], None]


@dataclass
class ResizeState:
    allocated: Allocation
    actuated: dict[str, Resources] = field(default_factory=dict)  # container id -> set by an update
    pending: ResizeCondition | None = None
    in_progress: ResizeCondition | None = None

    @classmethod
    def of(cls, row: DesiredPod, pod: Pod) -> "ResizeState":
        resize = row.resize or {}
        return cls(allocated=row.allocated if row.allocated is not None else spec_allocation(pod),
                   actuated=dict(row.actuated or {}), pending=resize.get("pending"),
                   in_progress=resize.get("in_progress"))

    def save(self, row: DesiredPod) -> None:
        row.allocated = self.allocated
        row.actuated = self.actuated
        row.resize = {"pending": self.pending, "in_progress": self.in_progress}

    def snapshot(self) -> str:
        """The state as one comparable value: is there anything new to save?"""
        return json.dumps([self.allocated, self.actuated, self.pending, self.in_progress], sort_keys=True)

    def conditions(self) -> list[PodCondition]:
        return ([condition(PENDING_CONDITION, self.pending)] if self.pending else []) + \
               ([condition(IN_PROGRESS_CONDITION, self.in_progress)] if self.in_progress else [])

    def applied(self, c: ContainerInfo) -> Resources | None:
        """What the runtime was last given for this container; None when unknown."""
        return self.actuated.get(c.id) or created_with(c.annotations.get(L.RESOURCES))

    def wants(self, name: str) -> Resources | None:
        """What container `name` should run with: its allocation, with the pod-level limits it
        takes as its own (allocation.effective); None for a container with no allocation."""
        own = self.allocated.get(name)
        return None if own is None else effective(own, self.allocated.get(POD_LEVEL))


def generation(pod: Pod) -> int | None:
    value = (pod.metadata.model_extra or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _resizable_running(pod: Pod, rt: RuntimePod) -> list[tuple[ContainerInfo, Container]]:
    """The pod's running containers in its current sandbox with their (allocated) specs;
    ephemeral containers have no resources."""
    sandbox = rt.current_sandbox
    specs = {c.name: c for c in pod.spec.initContainers + pod.spec.containers}
    return [(c, specs[c.name]) for c in rt.running_containers
            if c.name in specs and sandbox is not None and c.sandbox_id == sandbox.id]


def _decreases(old: Resources | None, new: Resources) -> bool:
    return any((a := quantity_of(old, kind, name)) is not None
               and ((b := quantity_of(new, kind, name)) is None or b < a)
               for kind in ("requests", "limits") for name in ("cpu", "memory"))


class Resizer:
    def __init__(self, runtime: RuntimeService, killer: Killer, backoff: Backoff, node: NodeFacts,
                 event: Event, cpus: CPUManager | None = None) -> None:
        self.runtime = runtime
        self.cpus = cpus or CPUManager()
        self.killer = killer
        self.backoff = backoff
        self.node = node
        self.event = event

    def allocate(self, pod: Pod, state: ResizeState, static: bool, others: Callable[[], list[Pod]],
                 capacity: dict[str, int]) -> float | None:
        """Grant the spec's resources if they changed and fit; otherwise keep the old grant and
        say why (PodResizePending). Returns when to look again (a deferred resize)."""
        desired = spec_allocation(pod)
        gen = generation(pod)
        if same(desired, state.allocated):
            state.pending = None
            return None
        def changes(resource: str) -> bool:
            return any(quantity_of(desired.get(name), kind, resource)
                       != quantity_of((state.allocated or {}).get(name), kind, resource)
                       for name in desired for kind in ("requests", "limits"))
        guaranteed = qos_class(pod) == "Guaranteed"
        decision = decide(pod, static, others(), capacity,
                          guaranteed and self.cpus.static and changes("cpu"),
                          guaranteed and bool(self.node.guaranteed_mems) and changes("memory"),
                          self.node.swap is not None
                          and swap_blocks_resize(pod, with_allocation(pod, state.allocated), self.node.swap))
        if decision.allocate:
            state.allocated = desired
            state.pending = None
            state.in_progress = {"reason": "", "message": "", "generation": gen, "since": rfc3339()}
            log.info("pod %s: resize to generation %s allocated", pod.full_name, gen)
            self.event(pod, "Normal", "ResizeStarted", event_message("Pod resize started", pod, desired, gen))
            return None
        previous = state.pending or {}
        if (previous.get("reason"), previous.get("message")) != (decision.reason, decision.message):
            log.info("pod %s: resize %s: %s", pod.full_name, decision.reason, decision.message)
            self.event(pod, "Warning", f"Resize{decision.reason}",
                       event_message(f"Pod resize {decision.reason.lower()}", pod, desired, gen, decision.message))
        since = previous.get("since") if previous.get("reason") == decision.reason else None
        state.pending = {"reason": decision.reason, "message": decision.message, "generation": gen,
                         "since": since or rfc3339()}
        return DEFERRED_RETRY if decision.reason == DEFERRED else None

    def _pod_cgroup(self, pod: Pod, state: ResizeState, containers_done: bool) -> str:
        """The pod cgroup's part of a resize (pod_cgroup.resize); "" when done or not needed."""
        parent = pod_cgroup_parent(pod, qos_class(pod), self.node.kubepods)
        if state.in_progress is None or not pod_cgroup.exists(parent, self.node.cgroup_root, self.node.cgroup_slices):
            return ""  # nothing to resize, or no pod cgroup yet: it is made with the allocation
        config = pod_cgroup.pod_cgroup_config(pod, cfs_quota=self.node.cpu_cfs_quota,
                                              cpu_period=self.node.cpu_cfs_period)
        problems = pod_cgroup.resize(parent, config, containers_done, self.node.cgroup_root, self.node.cgroup_slices)
        if problems:
            log.warning("pod %s: resizing the pod cgroup: %s", pod.full_name, "; ".join(problems))
            return f"resizing the pod cgroup: {'; '.join(problems)}"
        return ""

    async def memory_fits(self, pod: Pod, rt: RuntimePod, state: ResizeState) -> str:
        """Before a granted resize changes anything: no memory limit it adds or lowers (the pod
        cgroup's, a running container's) is at or below what is in use now. The error, or ""."""
        if state.in_progress is None:
            return ""
        changes = []
        parent = pod_cgroup_parent(pod, qos_class(pod), self.node.kubepods)
        now = pod_cgroup.current(parent, self.node.cgroup_root, self.node.cgroup_slices)  # None: not made yet
        new = pod_cgroup.pod_cgroup_config(pod).memory_limit
        if now is not None and new is not None:
            changes.append(MemoryLimitChange("", new, now.memory_limit, None))
        running = {c.name: c for c, _ in _resizable_running(pod, rt)}
        for name, c in running.items():
            want, have = state.wants(name), state.applied(c)
            limit = quantity_of(want, "limits", "memory")
            if limit is not None:
                old = quantity_of(have, "limits", "memory")
                changes.append(MemoryLimitChange(name, int(limit), None if old is None else int(old), None))
        if not any(change.lowers for change in changes):
            return ""
        reader = CgroupReader(self.node.cgroup_root, kubepods=self.node.kubepods)
        cgroup = reader.pod_cgroup(pod.uid)
        sandbox = rt.current_sandbox
        try:
            stats = {st.attributes.id: st for st in await self.runtime.list_container_stats(sandbox.id)} \
                if sandbox is not None else {}
        except CRIError as exc:
            log.warning("pod %s: reading memory usage before a resize: %s", pod.full_name, exc)
            stats = {}
        for change in changes:
            if not change.name:
                change.usage = reader.sample(cgroup).memory_usage if cgroup is not None else None
            elif (st := stats.get(running[change.name].id)) is not None and st.memory.HasField("usage_bytes"):
                change.usage = st.memory.usage_bytes.value
        error = memory_limits_below_usage(changes)
        if error:
            log.info("pod %s: resize not actuated: %s", pod.full_name, error)
        return error

    def prepare(self, pod: Pod, state: ResizeState) -> str:
        """Before any container of a resizing pod grows or restarts: the pod cgroup holds both
        the old and the new settings. The error, or ""."""
        return self._pod_cgroup(pod, state, containers_done=False)

    async def restarts(self, pod: Pod, rt: RuntimePod, state: ResizeState) -> bool:
        """Kill the running containers whose resize their resizePolicy says needs a restart;
        they start again at once with their allocation. True when any was killed."""
        killed = False
        if state.in_progress is None:
            return False  # only a granted resize restarts a container
        sandbox = rt.current_sandbox
        for c, spec in _resizable_running(pod, rt):
            want, have = state.wants(c.name), state.applied(c)
            if want is None or have is None or not needs_restart(spec, have, want):
                continue
            log.info("pod %s: container %s resize requires restart", pod.full_name, c.name)
            self.event(pod, "Normal", "Killing", f"Container {c.name} resize requires restart")
            await self.killer.kill_container(c, spec, sandbox.ip if sandbox else "",
                                             time.monotonic() + pod.spec.terminationGracePeriodSeconds,
                                             reason="resize requires restart")
            self.backoff.forget(backoff_key(pod, spec))  # not a crash: no back-off
            killed = True
        return killed

    async def update_in_place(self, pod: Pod, rt: RuntimePod, state: ResizeState) -> str:
        """UpdateContainerResources for every running container not at its allocation,
        decreases first (what they give back makes room for the increases). Returns the error,
        or "" when every running container is at its allocation."""
        qos = qos_class(pod)
        todo = []
        for c, spec in _resizable_running(pod, rt):
            want, have = state.wants(c.name), state.applied(c)
            if want is None or (have is not None and not changed(have, want)):
                continue
            todo.append((not _decreases(have, want), c, spec, want))
        for _, c, spec, want in sorted(todo, key=lambda t: t[0]):
            try:
                await self.runtime.update_container_resources(
                    c.id, linux_resources(pod, spec, qos, self.node, self.cpus.cpuset_for(pod.uid, spec.name)))
            except CRIError as exc:
                log.warning("pod %s: resizing container %s: %s", pod.full_name, c.name, exc)
                return f"updating the resources of container {c.name}: {exc.details}"
            state.actuated[c.id] = want
            log.info("pod %s: container %s resized in place", pod.full_name, c.name)
        return self._pod_cgroup(pod, state, containers_done=True)

    def settle(self, pod: Pod, rt: RuntimePod, state: ResizeState, error: str) -> None:
        """PodResizeInProgress while a running container is not at its allocation (reason Error
        when an update failed), gone with a ResizeCompleted event once all are."""
        running = _resizable_running(pod, rt)
        live = {c.id for c, _ in running}
        state.actuated = {cid: r for cid, r in state.actuated.items() if cid in live}
        behind = [c.name for c, _ in running if (want := state.wants(c.name)) is not None
                  and ((have := state.applied(c)) is None or changed(have, want))]
        gen = generation(pod)
        if error:
            previous = state.in_progress or {}
            if previous.get("message") != error:
                self.event(pod, "Warning", "ResizeError",
                           event_message("Pod resize error", pod, state.allocated, gen, error))
            state.in_progress = {"reason": ERROR, "message": error,
                                 "generation": previous.get("generation", gen),
                                 "since": previous.get("since") or rfc3339()}
        elif behind:
            if state.in_progress is None or state.in_progress.get("reason"):
                state.in_progress = {"reason": "", "message": "", "generation": gen,
                                     "since": (state.in_progress or {}).get("since") or rfc3339()}
        elif state.in_progress is not None:
            log.info("pod %s: resize completed", pod.full_name)
            self.event(pod, "Normal", "ResizeCompleted",
                       event_message("Pod resize completed", pod, state.allocated, gen))
            state.in_progress = None
