"""The kubelet's CPU manager (cpuManagerPolicy): which CPUs each container may run on.

- `none`: no CPU sets; every container runs on every CPU, weighed by its shares and quota.
- `static`: a container of a Guaranteed pod that asks for a whole number of CPUs gets that many
  CPUs of its own, taken at admission (a pod they do not fit is rejected, as the kubelet rejects
  it: UnexpectedAdmissionError). Every other container runs on the shared pool: all CPUs but
  those given out. The reserved CPUs (reservedSystemCPUs, else as many as systemReserved plus
  kubeReserved cpu round up to, the first in topology order) stay in the shared pool and are
  never given out. The CPUs given out are kept on the pod's DesiredPod row, so a restart of
  pod-sync knows them; they are free again once the pod is gone or has finished. Containers on
  the shared pool follow it every cpuManagerReconcilePeriod (UpdateContainerResources).
  cpuManagerPolicyOptions (shared/config/cpu_policy_options.py): `full-pcpus-only` gives out whole
  physical cores only (SMTAlignmentError otherwise); `strict-cpu-reservation` takes the reserved
  CPUs out of the shared pool as well. A shared pool left empty (every CPU not reserved given out
  under strict-cpu-reservation) is not applied: new containers start on the runtime's default
  (every CPU) and running ones keep their CPUs, as with the kubelet.
A non-restartable init container runs before the app containers, so it takes its CPUs from
those its pod's app containers got (more only if it asks for more), as the kubelet reuses them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable

from cri_api.v1 import api_pb2 as cri
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.pod_sync.runtime_config import NodeFacts, linux_resources
from shared.config.cpu_policy_options import CPUPolicyOptions
from shared.host.cpu_topology import online_cpus, physical_cores, reserved_cpus, topology_order
from shared.model.cpusets import format_cpuset, parse_cpuset
from shared.model.podspec import Container, Pod
from shared.model.qos import qos_class
from shared.model.quantity import millicores
from shared.runtime.cri import CRIError, RuntimeService
from shared.runtime.cri import labels as L
from shared.store import DesiredPod, Store

log = logging.getLogger(__name__)

STATIC = "static"
UNEXPECTED = "UnexpectedAdmissionError"


class NotEnoughCPUs(Exception):
    def __init__(self, requested: int, available: int) -> None:
        super().__init__(f"not enough cpus available to satisfy request: requested={requested}, available={available}")


class SMTAlignmentError(Exception):
    """full-pcpus-only: a request that whole free cores cannot meet (the kubelet's words)."""

    reason = "SMTAlignmentError"

    def __init__(self, requested: int, per_core: int, available: int | None = None) -> None:
        if available is None:
            text = f"SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}"
        else:
            text = (f"SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {available}, "
                    f"requested CPUs = {requested}, CPUs per core = {per_core}")
        super().__init__(text)


def exclusive_count(pod: Pod, c: Container) -> int:
    """The CPUs of its own a container gets under the static policy: its CPU request when the
    pod is Guaranteed and the request is a whole number, else none (the kubelet's guaranteedCPUs)."""
    if qos_class(pod) != "Guaranteed":
        return 0
    cpu = c.resources.requests.get("cpu", c.resources.limits.get("cpu"))
    if cpu is None:
        return 0
    milli = millicores(cpu)
    return milli // 1000 if milli % 1000 == 0 else 0


@dataclass
class StaticPolicy:
    order: list[int]            # every CPU of the node, in topology order
    reserved: frozenset[int]    # never given out
    # The node's physical cores (hyperthreads together), in topology order; empty: each CPU a core.
    cores: list[frozenset[int]] = field(default_factory=list)
    options: CPUPolicyOptions = field(default_factory=CPUPolicyOptions)

    @property
    def cpus_per_core(self) -> int:
        return len(self.order) // len(self.cores) if self.cores else 1

    def allocate(self, pod: Pod, taken: frozenset[int]) -> dict[str, frozenset[int]]:
        """The CPUs of their own for the pod's containers, from those neither reserved nor
        `taken` by other pods (NotEnoughCPUs or SMTAlignmentError when they do not fit). Empty:
        none asks."""
        running = [c for c in pod.spec.initContainers if c.restartPolicy == "Always"] + list(pod.spec.containers)
        wants = [(c.name, n) for c in running if (n := exclusive_count(pod, c))]
        inits = [(c.name, n) for c in pod.spec.initContainers
                 if c.restartPolicy != "Always" and (n := exclusive_count(pod, c))]
        needed = sum(n for _, n in wants)
        # An init container runs alone: it reuses the app containers' CPUs, and needs more only
        # for what it asks beyond them.
        needed = max([needed, *(n for _, n in inits)])
        if not needed:
            return {}
        if self.options.full_pcpus_only:
            free = self._whole_free_cores(pod, taken, needed)
        else:
            free = [cpu for cpu in self.order if cpu not in taken and cpu not in self.reserved]
        if needed > len(free):
            raise NotEnoughCPUs(needed, len(free))
        out: dict[str, frozenset[int]] = {}
        at = 0
        for name, n in wants:
            out[name] = frozenset(free[at:at + n])
            at += n
        for name, n in inits:
            out[name] = frozenset(free[:n])
        return out

    def _whole_free_cores(self, pod: Pod, taken: frozenset[int], needed: int) -> list[int]:
        """full-pcpus-only: the CPUs of the cores wholly free (no CPU taken, none reserved), in
        topology order, after the kubelet's checks: each container's request a multiple of the
        CPUs per core (in the order the kubelet allocates: init containers first), and the pod's
        `needed` CPUs within the free CPUs off the reserved CPUs' cores."""
        per_core = self.cpus_per_core
        for c in [*pod.spec.initContainers, *pod.spec.containers]:
            if (n := exclusive_count(pod, c)) % per_core:
                raise SMTAlignmentError(n, per_core)
        cores = self.cores or [frozenset({cpu}) for cpu in self.order]
        reserved_cores = frozenset(cpu for core in cores if core & self.reserved for cpu in core)
        available = len(frozenset(self.order) - taken - reserved_cores)
        if needed > available:
            raise SMTAlignmentError(needed, per_core, available)
        return [cpu for core in cores if not core & (taken | reserved_cores) for cpu in sorted(core, key=self.order.index)]

    def shared_pool(self, taken: frozenset[int]) -> frozenset[int]:
        pool = frozenset(self.order) - taken
        return pool - self.reserved if self.options.strict_cpu_reservation else pool


@dataclass
class CPUManager:
    """What pod-sync asks: the CPU set a container is created with and kept on."""

    policy: StaticPolicy | None = None
    # Pod uid -> container name -> its CPUs, for every pod holding CPUs of its own (the store's
    # DesiredPod.exclusive_cpus, read again every reconcile; updated at admission).
    assignments: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)

    @classmethod
    def from_config(cls, policy: str, reserved_system_cpus: str, reserved_millicores: int,
                    options: CPUPolicyOptions | None = None) -> CPUManager:
        if policy != STATIC:
            return cls()
        options = options or CPUPolicyOptions()
        cpus = online_cpus()
        order = topology_order(cpus)
        reserved = reserved_cpus(reserved_system_cpus, reserved_millicores, order)
        static = StaticPolicy(order, reserved, physical_cores(cpus), options)
        log.info("CPU manager static: CPUs %s (%d per core), reserved %s (never given out%s)%s", format_cpuset(cpus),
                 static.cpus_per_core, format_cpuset(reserved),
                 "; not in the shared pool either: strict-cpu-reservation" if options.strict_cpu_reservation else "",
                 "; whole cores only: full-pcpus-only" if options.full_pcpus_only else "")
        return cls(static)

    @property
    def static(self) -> bool:
        return self.policy is not None

    def taken(self) -> frozenset[int]:
        return taken_cpus(self.assignments)

    def cpuset_for(self, uid: str, container: str) -> str:
        """The CPU set to give a container ("" under the none policy: the runtime's default)."""
        if self.policy is None:
            return ""
        own = self.assignments.get(uid, {}).get(container)
        return format_cpuset(own if own else self.policy.shared_pool(self.taken()))  # "" for an empty pool

    @staticmethod
    def stored(assignment: dict[str, frozenset[int]]) -> dict[str, str]:
        return {name: format_cpuset(cpus) for name, cpus in assignment.items()}

    @staticmethod
    def loaded(stored: dict[str, str] | None) -> dict[str, frozenset[int]]:
        return {name: parse_cpuset(text) for name, text in (stored or {}).items()}


def taken_cpus(assignments: dict[str, dict[str, frozenset[int]]]) -> frozenset[int]:
    return frozenset(cpu for by_name in assignments.values() for cpus in by_name.values() for cpu in cpus)


def assignments_in(s: Session) -> dict[str, dict[str, frozenset[int]]]:
    """Every pod's exclusive CPUs as the store has them: those of pods still admitted and not
    finished (a pod that is gone, or failed for good, holds none)."""
    return {d.uid: CPUManager.loaded(d.exclusive_cpus)
            for d in s.scalars(select(DesiredPod).where(DesiredPod.admitted.is_(True), DesiredPod.finished.is_(False)))
            if d.exclusive_cpus}


def load_assignments(store: Store) -> dict[str, dict[str, frozenset[int]]]:
    with store.session() as s:
        return assignments_in(s)


class CPUSetReconciler:
    """Keeps every running container on its CPU set: the shared pool follows the CPUs given
    out and given back (the kubelet's reconcileState, every cpuManagerReconcilePeriod)."""

    def __init__(self, manager: CPUManager, runtime: RuntimeService, store: Store, node: NodeFacts,
                 pod_of: Callable[[str], Pod | None], every: float) -> None:
        self.manager = manager
        self.runtime = runtime
        self.store = store
        self.node = node
        self.pod_of = pod_of
        self.every = every
        self.applied: dict[str, str] = {}  # container id -> the CPU set last given to it

    async def run(self) -> None:
        while True:
            try:
                await self.reconcile()
            except CRIError as exc:
                log.warning("CPU manager: cannot list containers: %s; trying again in %.0fs", exc, self.every)
            await asyncio.sleep(self.every)

    async def reconcile(self) -> int:
        """Update the containers not on their CPU set; returns how many were updated."""
        self.manager.assignments = await self.store.run(load_assignments, self.store)
        running = [c for c in await self.runtime.list_containers({L.MANAGED_BY: "true"})
                   if c.state == cri.CONTAINER_RUNNING]
        ids = {c.id for c in running}
        self.applied = {cid: v for cid, v in self.applied.items() if cid in ids}
        updated = 0
        for c in running:
            uid, name = c.labels.get(L.POD_UID, ""), c.metadata.name
            want = self.manager.cpuset_for(uid, name)
            if not want:  # an empty shared pool: the container keeps its CPUs (the kubelet skips it too)
                continue
            if self.applied.get(c.id) == want:
                continue
            pod = self.pod_of(uid)
            spec = next((s for s in pod.spec.all_containers if s.name == name), None) if pod is not None else None
            if pod is None or spec is None:
                continue
            try:
                await self.runtime.update_container_resources(
                    c.id, linux_resources(pod, spec, qos_class(pod), self.node, want))
            except CRIError as exc:
                log.warning("CPU manager: pod %s container %s: cannot move it to CPUs %s: %s", pod.full_name, name,
                            want, exc)
                continue
            if c.id in self.applied:
                log.info("CPU manager: pod %s container %s now on CPUs %s", pod.full_name, name, want)
            self.applied[c.id] = want
            updated += 1
        return updated
