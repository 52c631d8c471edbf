"""Syncing one pod: read what it should be, look at the runtime, act, record what is there now."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from cri_api.v1 import api_pb2 as cri
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from services.pod_sync import metrics as M
from services.pod_sync import pod_cgroup, user_namespaces
from services.pod_sync.actions import PodActions, backoff_key, backoff_prefix, compute_pod_actions
from services.pod_sync.admission import (
    EVICTED,
    SHUTDOWN_REASONS,
    Verdict,
    admit,
    admit_exec_strings,
    admit_os,
    admit_supplemental_groups_policy,
    admit_sysctls,
    admit_to_node,
    admit_under_pressure,
    admit_unless_shutting_down,
)
from services.pod_sync.cpu_manager import (
    UNEXPECTED,
    CPUManager,
    NotEnoughCPUs,
    SMTAlignmentError,
    StaticPolicy,
    assignments_in,
    taken_cpus,
)
from services.pod_sync.env_sources import EnvSource, EnvSourceError, StaticEnvSource
from services.pod_sync.etc_hosts import hosts_content, node_hosts_file, wants_managed_hosts, write_hosts_file
from services.pod_sync.hooks import HookFailed, run_hook
from services.pod_sync.image_volumes import (
    IMAGE_VOLUME_MOUNT_FAILED,
    ImageVolumes,
    ImageVolumeUnsupported,
    MountedImage,
)
from services.pod_sync.images import EnsuredImage, ImageManager, ImagePullError
from services.pod_sync.killing import MIN_GRACE, Killer
from services.pod_sync.memory_qos import pod_memory_high, pod_memory_protection, tier_memory_protection
from services.pod_sync.observed import observed_containers
from services.pod_sync.pod_resources_status import PodResources, pod_resources
from services.pod_sync.pull_secrets import Credential
from services.pod_sync.resizer import Resizer, ResizeState, generation
from services.pod_sync.resources import pod_cgroup_parent, remove_pod_cgroups
from services.pod_sync.runtime_config import NodeFacts, SubPathMounter, container_config, pod_hostname, sandbox_config
from services.pod_sync.runtime_driver import RuntimeDriverCheck
from services.pod_sync.runtime_view import ContainerInfo, RuntimePod, SandboxInfo, get_runtime_pod
from services.pod_sync.security import check_run_as_non_root, needs_image_user
from shared.bus.events import Recorder
from shared.config.settings import NodeSettings
from shared.config.thresholds import PRESSURE_CONDITIONS
from shared.host.facts import node_labels
from shared.host.node_resources import Reservations, allocatable, disk_capacity_bytes
from shared.host.safe_paths import UnsafePath, beneath
from shared.host.subpath import SubPathMounts
from shared.model.allocation import spec_allocation, with_allocation
from shared.model.podspec import Container, Pod, PodCache
from shared.model.probe_state import ProbeState
from shared.model.qos import is_critical, qos_class
from shared.runtime.cri import CRIError, RuntimeService
from shared.runtime.cri import labels as L
from shared.store import (
    DesiredPod,
    NetworkStatus,
    NodeHealth,
    NodePressure,
    PodEviction,
    PodRuntime,
    PodVolume,
    ProbeResult,
    Store,
)
from shared.store.models import is_static, utcnow
from shared.store.node_shutdown import TERMINATED, shutting_down
from shared.store.runtime_status import runtime_keeps_groups_strict
from shared.tasks.retry import Backoff
from shared.tracing import spans as tracing

log = logging.getLogger(__name__)

DEADLINE_EXCEEDED = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"

# A failed sync (runtime error, network not ready) is retried after this long.
ERROR_RETRY = 2.0
POST_START_HOOK_TIMEOUT = 30.0


@dataclass
class SyncResult:
    # Sync again after this many seconds even if nothing else happens (a back-off ending).
    requeue_after: float | None = None
    gone: bool = False  # the pod is fully removed


@dataclass
class _Progress:
    """What this process has been doing for a pod that the runtime cannot tell: pull notes and
    how long pulls took (for the start-latency SLI)."""

    seen_at: float
    pull_notes: dict[str, str] = field(default_factory=dict)
    pull_seconds: float = 0.0
    started_any: bool = False
    # DesiredPod.restarted_all_at as the last sync read or wrote it (for what is recorded).
    restarted_all_at: float | None = None


@dataclass
class _Step:
    """What one sync of a running pod found: containers waiting and why, the error that stopped
    it (reason, message), and when to look again (None: only when something changes)."""

    waiting: dict[str, tuple[str, str]]
    error: tuple[str, str] = ("", "")
    requeue: float | None = None

    def sooner(self, seconds: float | None) -> None:
        """Look again within `seconds` at the latest."""
        if seconds is not None:
            self.requeue = min(self.requeue or seconds, seconds)

    def fail(self, error: tuple[str, str]) -> None:
        """Nothing new starts this time: say why and try again after ERROR_RETRY."""
        self.error = error
        self.requeue = ERROR_RETRY


class PodSyncer:
    def __init__(self, runtime: RuntimeService, images: ImageManager, store: Store,
                 settings: NodeSettings, crash_backoff: Backoff, node: NodeFacts, events: Recorder,
                 env_source: EnvSource | None = None, subpaths: SubPathMounter | None = None,
                 cpus: CPUManager | None = None) -> None:
        self.runtime = runtime
        self.cpus = cpus or CPUManager()
        self.subpaths = subpaths or SubPathMounts(node.pods_dir)
        # Standalone: no API server to read configMaps, secrets or services from.
        self.env_source = env_source or StaticEnvSource(api=False)
        self.images = images
        self.image_volumes = ImageVolumes(images, runtime)
        user_ns = settings.kubelet.user_namespaces
        self.user_namespaces = user_namespaces.for_node(node.pods_dir, user_ns.ids if user_ns else user_namespaces.UNIT,
                                                        settings.kubelet.max_pods)
        self.store = store
        self.settings = settings
        self.backoff = crash_backoff
        self.node = node
        self.driver_check = RuntimeDriverCheck(runtime, settings.kubelet.cgroup_driver)
        self.events = events
        self.killer = Killer(runtime, events)
        self.resizer = Resizer(runtime, self.killer, crash_backoff, node, self._event, self.cpus)
        self._progress: dict[str, _Progress] = {}
        self._pods = PodCache()
        # Per pod, what its runtime row last said (all but updated_at): a resync that finds the
        # pod as it was writes nothing. Only pod-sync writes these rows, so the memory is true.
        self._recorded: dict[str, tuple[object, ...]] = {}
        self._capacity = allocatable(node.cpu_millicores, node.memory_bytes, Reservations.from_config(settings.kubelet),
                                     disk_capacity_bytes(str(settings.root_dir)))
        if not settings.kubelet.local_storage_capacity_isolation:
            del self._capacity["ephemeral-storage"]  # the node reports none: a request of it does not fit
        self._tiers_protected = False  # the QoS tiers' memory protection written since the start

    # -- reading the store -------------------------------------------------------------------

    def _desired(self, uid: str) -> tuple[DesiredPod | None, PodEviction | None]:
        """The pod as its source wants it, and eviction's decision about it if there is one."""
        with self.store.session() as s:
            return s.get(DesiredPod, uid), s.get(PodEviction, uid)

    async def remove_orphaned_pod_cgroups(self, known: set[str]) -> None:
        """Pod cgroups of no pod pod-sync knows (desired now, or in the runtime: `known`) are a
        crashed run's or a pod's removed while pod-sync was down: remove the empty ones."""
        found = await asyncio.to_thread(pod_cgroup.pod_cgroups, self.node.cgroup_root, self.node.cgroup_slices,
                                        self.node.kubepods)
        # Read after the listing: a pod admitted since has its cgroup made after it was desired.
        known = known | set(self.desired_uids())
        orphans = {uid: name for uid, name in found.items() if uid not in known}
        if not orphans:
            return
        removed = await asyncio.to_thread(pod_cgroup.remove_orphans, orphans, self.node.cgroup_root,
                                          self.node.cgroup_slices)
        if removed:
            log.info("removed %d pod cgroup(s) of no pod: %s", len(removed), ", ".join(removed))

    def is_desired(self, uid: str) -> bool:
        with self.store.session() as s:
            return s.get(DesiredPod, uid) is not None

    def desired_uids(self) -> list[str]:
        with self.store.session() as s:
            return list(s.scalars(select(DesiredPod.uid)))

    def _volumes(self, pod: Pod) -> tuple[dict[str, PodVolume], tuple[str, str]]:
        """The pod's volumes as the volume service set them up, and (reason, message) while any
        is not ready: containers start only once every volume is there."""
        if not pod.spec.volumes:
            return {}, ("", "")
        with self.store.session() as s:
            rows = {r.name: r for r in s.scalars(select(PodVolume).where(PodVolume.pod_uid == pod.uid))}
        failed = [rows[v.name] for v in pod.spec.volumes if v.name in rows and not rows[v.name].ready]
        if failed:
            return rows, (failed[0].reason or "FailedMount", "; ".join(r.message for r in failed))
        missing = [v.name for v in pod.spec.volumes if v.name not in rows]
        if missing:
            return rows, ("ContainerCreating", f"the volume service has not set up [{', '.join(missing)}] yet")
        return rows, ("", "")

    def _network_ready(self) -> tuple[bool, str]:
        with self.store.session() as s:
            row = s.get(NetworkStatus, 1)
        if row is None:
            return False, "network plugin not ready: the network service has not reported yet"
        return row.ready, row.message

    # -- admission ---------------------------------------------------------------------------

    async def _admit(self, row: DesiredPod, pod: Pod) -> bool:
        """Decide once and remember."""
        if row.admitted:
            return True
        if row.rejection_reason:
            return False
        # On the store's one thread, as every write of this service: decisions cannot
        # interleave, and waiting for the store's lock does not hold the loop.
        verdict = await self.store.run(self._decide_admission, row, pod)
        if not verdict.admitted:
            log.warning("pod %s rejected: %s", pod.full_name, verdict.message)
            self._event(pod, "Warning", verdict.reason, verdict.message)  # as the kubelet's rejectPod
        return verdict.admitted

    def _decide_admission(self, row: DesiredPod, pod: Pod) -> Verdict:
        """The admission verdict for the pod, stored on its row."""
        with self.store.session() as s:
            others = self._admitted_others(s, row.uid)
            pressure = [c for c in PRESSURE_CONDITIONS if c in set(s.scalars(
                select(NodePressure.condition).where(NodePressure.pressure.is_(True))))]
            # First what no node could run, then in the kubelet's order: eviction (node
            # pressure), sysctls, the CPU manager's allocation, then resources (its predicates).
            verdict = admit_exec_strings(pod)
            if verdict.admitted:
                verdict = admit_unless_shutting_down(shutting_down(s))
            if verdict.admitted:
                verdict = admit_under_pressure(pod, pressure, is_critical(pod, static=is_static(row.source)))
            if verdict.admitted:
                verdict = admit_sysctls(pod, self.settings.kubelet.allowed_unsafe_sysctls)
            cpus: dict[str, frozenset[int]] = {}
            if verdict.admitted and self.cpus.policy is not None:  # kept only if the pod is admitted
                verdict, cpus = self._take_cpus(s, self.cpus.policy, row.uid, pod)
            if verdict.admitted:
                verdict = admit(pod, others, self._capacity,
                               self.settings.kubelet.pod_capacity(self.node.cpu_millicores // 1000))
            if verdict.admitted:
                verdict = admit_to_node(pod, node_labels(self.node.name, self.node.labels), self.node.name)
            if verdict.admitted:
                verdict = admit_os(pod)
            if verdict.admitted:
                verdict = admit_supplemental_groups_policy(pod, runtime_keeps_groups_strict(s.get(NodeHealth, 1)))
            stored = s.get(DesiredPod, row.uid)
            assert stored is not None  # read in this same session
            stored.admitted = verdict.admitted
            if verdict.admitted:
                stored.allocated = spec_allocation(pod)
                stored.exclusive_cpus = CPUManager.stored(cpus)
                if cpus:
                    self.cpus.assignments[row.uid] = cpus
            stored.rejection_reason = verdict.reason
            stored.rejection_message = verdict.message
        return verdict

    @staticmethod
    def _take_cpus(s: Session, policy: StaticPolicy, uid: str, pod: Pod) -> tuple[Verdict, dict[str, frozenset[int]]]:
        """CPUs of their own for the pod's whole-CPU Guaranteed containers, from those no other
        pod holds (the static CPU manager's Allocate, part of admission as in the kubelet)."""
        others = assignments_in(s)
        others.pop(uid, None)
        try:
            return Verdict(True), policy.allocate(pod, taken_cpus(others))
        except NotEnoughCPUs as exc:
            return Verdict(False, UNEXPECTED, f"Allocate failed due to {exc}, which is unexpected"), {}
        except SMTAlignmentError as exc:  # an admission error of its own kind: its reason, its words
            return Verdict(False, exc.reason, str(exc)), {}

    def pod_at_allocation(self, uid: str) -> Pod | None:
        """An admitted pod as it runs: its spec at the resources it was allocated."""
        with self.store.session() as s:
            d = s.get(DesiredPod, uid)
            if d is None or not d.admitted:
                return None
            pod = self._pods.get(d.uid, d.manifest)
            return with_allocation(pod, d.allocated) if d.allocated is not None else pod

    def _admitted_others(self, s: Session, uid: str) -> list[Pod]:
        """Every other admitted pod, at the resources it was allocated (a resize not granted
        yet takes nothing)."""
        return [with_allocation(pod, d.allocated) if d.allocated is not None else pod
                for d in s.scalars(select(DesiredPod).where(DesiredPod.admitted.is_(True),
                                                            DesiredPod.deleting.is_(False), DesiredPod.uid != uid))
                for pod in (self._pods.get(d.uid, d.manifest),)]

    async def update_qos_tiers(self) -> None:
        """The Burstable tier's CPU shares follow its pods' requests, BestEffort's stay at the
        minimum: without them each tier weighs as much as any one Guaranteed pod. On cgroup v2
        the tiers' memory protection follows the pods too (memoryReservationPolicy)."""
        await self.store.run(self._write_qos_tiers)

    def _write_qos_tiers(self) -> None:
        # On the store's thread after any admission asked for before: the tiers hold every
        # pod admitted so far.
        with self.store.session() as s:
            pods = self._admitted_others(s, "")
        protection = self._tier_protection(pods)
        problems = pod_cgroup.set_qos_tiers(pods, self.node.cgroup_root, self.node.cgroup_slices, self.node.kubepods,
                                            protection)
        if protection is not None and not problems:
            self._tiers_protected = True
            M.MEMORY_QOS_MIN_BYTES.set(protection[0])
            M.MEMORY_QOS_LOW_BYTES.set(protection[1])
        if problems:
            log.warning("QoS cgroups: %s", "; ".join(problems))

    def _tier_protection(self, pods: list[Pod]) -> tuple[int, int] | None:
        """The memory the QoS tiers protect (Guaranteed, Burstable), None to leave it: with
        TieredReservation it follows the pods; with None it is reset to 0 once, at the first
        write after the start (as the kubelet, which leaves it alone after that)."""
        p = self.node.memory_protection
        if p is None or (not p.tiered and self._tiers_protected):
            return None
        return tier_memory_protection(pods, p)

    def _others_for_resize(self, uid: str) -> list[Pod]:
        with self.store.session() as s:
            return self._admitted_others(s, uid)

    async def _pull_credentials(self, pod: Pod) -> list[Credential]:
        """The pod's imagePullSecrets' logins; secrets that give none are named in an event and
        the pull goes on with the rest (the kubelet's FailedToRetrieveImagePullSecret)."""
        if not pod.spec.imagePullSecrets:
            return []
        found = await self.env_source.pull_credentials(pod)
        if found.problems:
            self._event(pod, "Warning", "FailedToRetrieveImagePullSecret",
                        f"Unable to retrieve some image pull secrets ({'; '.join(found.problems)}); "
                        "attempting to pull the image may not succeed.")
        return found.credentials

    def _event(self, pod: Pod, type_: str, reason: str, message: str) -> None:
        self.events.pod(pod.metadata.namespace, pod.metadata.name, pod.uid, type_, reason, message)

    # -- sync --------------------------------------------------------------------------------

    async def sync(self, uid: str) -> SyncResult:
        row, eviction = self._desired(uid)
        if row is not None:
            tracing.pod_names(row.namespace, row.name)
        rt = await get_runtime_pod(self.runtime, uid)
        if row is None or row.deleting:
            tracing.pod_terminating()
            return await self._terminate(uid, row, rt)
        pod = self._pods.get(uid, row.manifest)
        if is_static(row.source) and row.rejection_reason in SHUTDOWN_REASONS and eviction is None:
            row = await self._run_again_after_shutdown(row, pod)
        if not await self._admit(row, pod):
            await self._record(pod, rt, {}, ("", ""))
            return SyncResult()
        if row.rejection_reason in (EVICTED, TERMINATED) or eviction is not None:
            return await self._stop_evicted(pod, row, rt, eviction)
        left = self._deadline_left(row, pod)
        if row.rejection_reason == DEADLINE_EXCEEDED or (left is not None and left <= 0):
            return await self._fail(pod, row, rt, DEADLINE_EXCEEDED, DEADLINE_MESSAGE,
                                    pod.spec.terminationGracePeriodSeconds)
        return await self._run(uid, row, pod, rt, left)

    async def _stop_evicted(self, pod: Pod, row: DesiredPod, rt: RuntimePod,
                            eviction: PodEviction | None) -> SyncResult:
        """A pod eviction decided to stop (evicted, or the node shutting down): Failed with its reason."""
        reason = eviction.reason if eviction else row.rejection_reason
        grace = eviction.grace_period_seconds if eviction else 0
        # A hard eviction (grace 0) kills at once: the node is short of something now, and
        # the kubelet's 2 s floor would only delay relief. A shutdown's grace is the
        # kubelet's override: no floor either.
        floor = 0 if grace == 0 or reason == TERMINATED else MIN_GRACE
        return await self._fail(pod, row, rt, reason, eviction.message if eviction else row.rejection_message,
                                grace, floor=floor, announce=False)

    async def _run(self, uid: str, row: DesiredPod, pod: Pod, rt: RuntimePod, left: float | None) -> SyncResult:
        """An admitted pod that should run: resize, kill what must go, start what is missing,
        record what the runtime then has."""
        progress = self._progress.setdefault(uid, _Progress(seen_at=row.seen_at.timestamp()))
        resize = ResizeState.of(row, pod)
        resize_before, allocated_before = resize.snapshot(), resize.allocated
        resize_retry = self.resizer.allocate(pod, resize, is_static(row.source),
                                             lambda: self._others_for_resize(uid), self._capacity)
        # From here on the pod is what the node granted: containers start with their allocation.
        pod = with_allocation(pod, resize.allocated)
        resize_error = await self.resizer.memory_fits(pod, rt, resize) or self.resizer.prepare(pod, resize)
        killed = await self._kill_unhealthy(pod, rt)
        if (not resize_error and await self.resizer.restarts(pod, rt, resize)) or killed:
            rt = await get_runtime_pod(self.runtime, uid)
        progress.restarted_all_at = row.restarted_all_at
        actions = compute_pod_actions(pod, rt, self.backoff, progress.restarted_all_at)
        if actions.restart_all:
            progress.restarted_all_at = await self._restart_all(pod, rt, actions.restart_all)
            rt = await get_runtime_pod(self.runtime, uid)
            actions = compute_pod_actions(pod, rt, self.backoff, progress.restarted_all_at)
        step = _Step(waiting=dict(actions.waiting))
        volumes = self._volumes_or_hold(pod, actions, step)
        pod_ip = self._pod_ip(pod, rt.current_sandbox)
        await self._kill_and_remove(pod, rt, actions, pod_ip)
        await self._start_missing(pod, rt, actions, volumes, progress, pod_ip, step)
        self._crash_loop_backoffs(pod, rt, step)
        step.sooner(left)

        fresh = await get_runtime_pod(self.runtime, uid) if not actions.noop else rt
        resize_error = resize_error or await self.resizer.update_in_place(pod, fresh, resize)
        self.resizer.settle(pod, fresh, resize, resize_error)
        step.sooner(resize_retry)
        step.sooner(ERROR_RETRY if resize_error else None)
        if resize.snapshot() != resize_before:
            await self.store.run(self._save_resize, uid, resize)
            if resize.allocated is not allocated_before:
                await self.update_qos_tiers()  # a granted resize changes its tier's requests
        await self._collect_garbage(pod, fresh)
        await self._record(pod, fresh, step.waiting, step.error, resize)
        self._observe_start(pod, fresh, progress)
        return SyncResult(requeue_after=step.requeue)

    def _volumes_or_hold(self, pod: Pod, actions: PodActions, step: _Step) -> dict[str, PodVolume]:
        """The pod's volumes; while one is not ready, nothing new starts and what runs keeps
        running (as the kubelet). The volume service's VolumesChanged wakes the pod; the requeue
        is the safety net."""
        volumes, volume_error = self._volumes(pod)
        if volume_error[0] and (actions.create_sandbox or actions.start):
            actions.create_sandbox = False
            actions.start = []
            step.fail(volume_error)
        return volumes

    async def _kill_and_remove(self, pod: Pod, rt: RuntimePod, actions: PodActions, pod_ip: str) -> None:
        if actions.kill_sandboxes:
            await self.killer.kill_sandboxes(pod, rt, actions.kill_sandboxes,
                                             pod.spec.terminationGracePeriodSeconds, pod_ip)
        for c, spec in actions.kill_containers:
            self._event(pod, "Normal", "Killing", f"Container {c.name} definition changed, will be restarted")
            await self.killer.kill_container(c, spec, pod_ip, time.monotonic() + pod.spec.terminationGracePeriodSeconds,
                                             reason="definition changed")
        for cid in actions.remove_containers:
            await self._remove_container(cid)

    async def _start_missing(self, pod: Pod, rt: RuntimePod, actions: PodActions, volumes: dict[str, PodVolume],
                             progress: _Progress, pod_ip: str, step: _Step) -> None:
        """The sandbox if it is to be made, then the containers to start (all at once). Counted
        as the kubelet counts pod starts: each sandbox attempted (not one held for the network),
        each that failed, and for pods with a user namespace each whose sync failed anywhere."""
        starting = actions.create_sandbox and (pod.spec.hostNetwork or self._network_ready()[0])
        userns = starting and pod.spec.hostUsers is False
        if starting:
            M.STARTED_PODS.inc()
        if userns:
            M.STARTED_USERNS_PODS.inc()
        failed = await self._start_sandbox_and_containers(pod, rt, actions, volumes, progress, pod_ip, step)
        if userns and failed:
            M.STARTED_USERNS_POD_ERRORS.inc()

    async def _start_sandbox_and_containers(self, pod: Pod, rt: RuntimePod, actions: PodActions,
                                            volumes: dict[str, PodVolume], progress: _Progress, pod_ip: str,
                                            step: _Step) -> bool:
        """True when something failed: the sandbox, or a container's start."""
        sandbox = rt.current_sandbox
        sandbox_id = sandbox.id if sandbox and sandbox.ready and not actions.create_sandbox else ""
        attempt = actions.sandbox_attempt if actions.create_sandbox else (sandbox.attempt if sandbox else 0)
        try:
            sb_config = sandbox_config(pod, attempt, self.settings)
            if pod.spec.hostUsers is False and (actions.create_sandbox or actions.start):
                userns = await self._user_namespace(pod)
                sb_config.linux.security_context.namespace_options.userns_options.CopyFrom(userns)
        except (ValueError, user_namespaces.UserNamespaceError) as exc:
            # A value the sandbox's files cannot hold (dns.py), no user namespace: nothing new starts.
            message = f"Failed to generate sandbox config for pod {pod.full_name}: {exc}"
            self._event(pod, "Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc}")
            if actions.create_sandbox:
                M.STARTED_POD_ERRORS.inc()
            actions.create_sandbox, actions.start = False, []
            step.fail(("FailedCreatePodSandBox", message))
            return True
        if actions.create_sandbox:
            sandbox_id, pod_ip, error = await self._create_sandbox(pod, sb_config)
            if error[0]:
                step.fail(error)
                if error[0] != "NetworkNotReady":
                    M.STARTED_POD_ERRORS.inc()
                    return True
        if not sandbox_id or not actions.start:
            return False
        results = await asyncio.gather(*(
            self._start_container(pod, rt, s.spec, s.attempt, s.init, sandbox_id, sb_config, pod_ip, progress,
                                  volumes, ephemeral=s.ephemeral)
            for s in actions.start))
        for start, failure in zip(actions.start, results, strict=True):
            if failure:
                step.waiting[start.spec.name] = failure
                step.sooner(ERROR_RETRY)
        return any(results)

    async def _user_namespace(self, pod: Pod) -> cri.UserNamespace:
        if isinstance(self.user_namespaces, str):
            raise user_namespaces.UserNamespaceError(self.user_namespaces)
        return await self.user_namespaces.options(pod.uid, self.runtime)

    def release_user_namespaces(self, known: set[str]) -> None:
        """Free the user namespace IDs of pods neither wanted nor in the runtime (`known`)."""
        if not isinstance(self.user_namespaces, str):
            self.user_namespaces.release_all_but(known | set(self.desired_uids()))

    def _crash_loop_backoffs(self, pod: Pod, rt: RuntimePod, step: _Step) -> None:
        """A BackOff event for each container in CrashLoopBackOff; look again when the first
        back-off ends."""
        for name, (reason, _) in step.waiting.items():
            if reason == "CrashLoopBackOff":
                self._event(pod, "Warning", "BackOff", f"Back-off restarting failed container {name} in pod "
                                                       f"{pod.metadata.name}_{pod.metadata.namespace}({pod.uid})")
        specs = {c.name: c for c in pod.spec.initContainers + pod.spec.containers}
        waits = [self.backoff.remaining(backoff_key(pod, specs[name]), last.finished_at)
                 for name, (reason, _) in step.waiting.items()
                 if reason == "CrashLoopBackOff" and name in specs and (last := rt.latest(name))]
        if any(w > 0 for w in waits):
            step.sooner(min(w for w in waits if w > 0))

    async def _restart_all(self, pod: Pod, rt: RuntimePod, containers: list[ContainerInfo]) -> float:
        """A container exited by a RestartAllContainers rule: stop every container of the pod
        that still runs, one after the other in the order given and at once (the kubelet's 2 s
        least grace, preStop hooks within it), keeping the sandbox; from the time returned they
        all run again from the first init container, without back-off."""
        started = time.time()
        log.info("pod %s: a container exited by a RestartAllContainers rule: restarting all its containers",
                 pod.full_name)
        sandbox = rt.current_sandbox
        specs = {c.name: c for c in pod.spec.initContainers + pod.spec.containers}
        for c in containers:
            self.backoff.forget(backoff_prefix(pod, c.name))
            if c.state == "running":
                await self.killer.kill_container(c, specs.get(c.name), sandbox.ip if sandbox else "",
                                                 time.monotonic() + MIN_GRACE,
                                                 reason="stopped to restart all containers of the pod", pod=pod)
        await self.store.run(self._save_restarted_all, pod.uid, started)
        return started

    def _save_restarted_all(self, uid: str, at: float) -> None:
        with self.store.session() as s:
            if (stored := s.get(DesiredPod, uid)) is not None:
                stored.restarted_all_at = at

    def _save_resize(self, uid: str, resize: ResizeState) -> None:
        with self.store.session() as s:
            if (stored := s.get(DesiredPod, uid)) is not None:  # gone meanwhile: nothing to keep
                resize.save(stored)

    @staticmethod
    def _deadline_left(row: DesiredPod, pod: Pod) -> float | None:
        """Seconds until spec.activeDeadlineSeconds runs out, counted as the kubelet counts it
        from the pod's start on this node (when the node first saw it)."""
        if pod.spec.activeDeadlineSeconds is None:
            return None
        seen = row.seen_at if row.seen_at.tzinfo else row.seen_at.replace(tzinfo=timezone.utc)
        return pod.spec.activeDeadlineSeconds - (datetime.now(timezone.utc) - seen).total_seconds()

    async def _fail(self, pod: Pod, row: DesiredPod, rt: RuntimePod, reason: str, message: str, grace: int,
                    floor: int = MIN_GRACE, announce: bool = True) -> SyncResult:
        """The pod fails for good (phase Failed with reason and message: activeDeadlineSeconds,
        eviction) and everything of it stops within grace seconds."""
        if row.rejection_reason != reason:
            await self.store.run(self._write_failed, row.uid, reason, message)
            log.info("pod %s: %s: %s", pod.full_name, reason, message)
            if announce:  # evictions are announced by the eviction service, which decided them
                self._event(pod, "Normal", reason, message)
        ready = [sb.id for sb in rt.sandboxes if sb.ready]
        if ready:
            sandbox = rt.current_sandbox
            await self.killer.kill_sandboxes(pod, rt, ready, grace, self._hook_ip(pod, sandbox), floor=floor)
            rt = await get_runtime_pod(self.runtime, row.uid)
        if not row.finished and not rt.running_containers and not any(sb.ready for sb in rt.sandboxes):
            await self.store.run(self._write_finished, row.uid)
        await self._record(pod, rt, {}, ("", ""))
        return SyncResult()

    async def _run_again_after_shutdown(self, row: DesiredPod, pod: Pod) -> DesiredPod:
        """A static pod a node shutdown stopped (or turned away) runs again once the shutdown is
        over (cancelled, or this is the next boot), as the kubelet starts static pods afresh
        when it starts. API pods stay Failed: their controllers have replaced them."""
        again = await self.store.run(self._write_run_again, row.uid)
        if again is None:
            return row
        log.info("static pod %s: the node shutdown that stopped it is over; it runs again", pod.full_name)
        return again

    def _write_run_again(self, uid: str) -> DesiredPod | None:
        with self.store.session() as s:
            if shutting_down(s):
                return None
            stored = s.get(DesiredPod, uid)
            if stored is None or stored.rejection_reason not in SHUTDOWN_REASONS:
                return None
            stored.admitted, stored.finished = False, False
            stored.rejection_reason, stored.rejection_message = "", ""
            s.flush()
            s.expunge(stored)
            return stored

    def _write_failed(self, uid: str, reason: str, message: str) -> None:
        with self.store.session() as s:
            if (stored := s.get(DesiredPod, uid)) is not None:
                stored.rejection_reason, stored.rejection_message = reason, message

    def _write_finished(self, uid: str) -> None:
        with self.store.session() as s:
            if (stored := s.get(DesiredPod, uid)) is not None:
                stored.finished = True

    async def _kill_unhealthy(self, pod: Pod, rt: RuntimePod) -> bool:
        """Kill running containers whose liveness or startup probe failed (the probe service
        decides; pod-sync acts). They are then restarted per restartPolicy."""
        with self.store.session() as s:
            failed = {(r.container_name, r.container_id): r for r in s.scalars(
                select(ProbeResult).where(ProbeResult.pod_uid == pod.uid, ProbeResult.result == ProbeState.FAILURE,
                                          ProbeResult.kind.in_(("liveness", "startup"))))}
        if not failed:
            return False
        specs = {c.name: c for c in pod.spec.initContainers + pod.spec.containers}
        sandbox = rt.current_sandbox
        killed = False
        for c in rt.running_containers:
            r = failed.get((c.name, c.id))
            if r is None or c.name not in specs:
                continue
            probe = specs[c.name].probe(r.kind)
            grace = (probe.terminationGracePeriodSeconds if probe and probe.terminationGracePeriodSeconds
                     else pod.spec.terminationGracePeriodSeconds)
            reason = f"{r.kind.capitalize()} probe failed: {r.message}".strip()
            log.info("pod %s: container %s failed its %s probe; killing it", pod.full_name, c.name, r.kind)
            self._event(pod, "Normal", "Killing",
                        f"Container {c.name} failed {r.kind} probe, will be restarted")
            await self.killer.kill_container(c, specs[c.name], self._hook_ip(pod, sandbox),
                                             time.monotonic() + grace, reason=reason)
            killed = True
        return killed

    async def _create_sandbox(self, pod: Pod, config: cri.PodSandboxConfig) -> tuple[str, str, tuple[str, str]]:
        if not pod.spec.hostNetwork:
            ready, message = self._network_ready()
            if not ready:
                return "", "", ("NetworkNotReady", f"network is not ready: {message}")
        problem = await self.driver_check.problem()
        if problem:
            self._event(pod, "Warning", "FailedCreatePodSandBox", problem)
            return "", "", ("FailedCreatePodSandBox", problem)
        # The pod's cgroup first, with its settings: the sandbox and the containers start in it.
        # In a thread: with the systemd driver this is a D-Bus round trip to systemd.
        cgroup = pod_cgroup.pod_cgroup_config(pod, self.settings.kubelet.pod_pids_limit, self.node.cpu_cfs_quota,
                                              self.node.cpu_cfs_period)
        if self.node.memory_throttling is not None:
            cgroup = dataclasses.replace(cgroup, memory_high=pod_memory_high(pod, self.node.memory_throttling))
        if self.node.memory_protection is not None:
            protect = pod_memory_protection(pod, self.node.memory_protection)
            cgroup = dataclasses.replace(cgroup, memory_min=protect.get("memory.min"),
                                         memory_low=protect.get("memory.low"))
        problems = await asyncio.to_thread(
            pod_cgroup.ensure, pod_cgroup_parent(pod, qos_class(pod), self.node.kubepods), cgroup,
            self.node.cgroup_root, self.node.cgroup_slices)
        if problems:
            message = f"Failed to set up the pod cgroup: {'; '.join(problems)}"
            log.warning("pod %s: %s", pod.full_name, message)
            self._event(pod, "Warning", "FailedCreatePodSandBox", message)
            return "", "", ("FailedCreatePodSandBox", message)
        await self.update_qos_tiers()
        try:
            sandbox_id = await self.runtime.run_pod_sandbox(config)
        except CRIError as exc:
            log.warning("pod %s: sandbox failed: %s", pod.full_name, exc)
            self._event(pod, "Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc.details}")
            return "", "", ("FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc.details}")
        log.info("pod %s: sandbox %s started (attempt %d)", pod.full_name, sandbox_id[:13],
                 config.metadata.attempt)
        status = await self.runtime.pod_sandbox_status(sandbox_id)
        return sandbox_id, self.node.ip if pod.spec.hostNetwork else status.network.ip, ("", "")

    def _pod_ip(self, pod: Pod, sandbox: SandboxInfo | None) -> str:
        """The pod's IP as the kubelet gives it (status.podIP, the downward API, hooks): a
        hostNetwork pod has the node's, always; any other the one its running sandbox got."""
        if pod.spec.hostNetwork:
            return self.node.ip
        return sandbox.ip if sandbox and sandbox.ready else ""

    async def _runtime_makes_rro_mounts(self, spec: Container) -> bool:
        """Whether the runtime's default handler makes recursive read-only mounts, asked only
        for a container that wants one (the handler's features are the runtime's to change)."""
        if not any(m.recursiveReadOnly in ("IfPossible", "Enabled") for m in spec.volumeMounts):
            return False
        try:
            status = await self.runtime.status()
        except CRIError as exc:
            raise ValueError(f"failed to resolve recursive read-only mode: runtime status: {exc.details}") from None
        handler = next((h for h in status.runtime_handlers if h.name == ""), None)
        return handler is not None and handler.features.recursive_read_only_mounts

    def _hook_ip(self, pod: Pod, sandbox: SandboxInfo | None) -> str:
        """Where a preStop hook of a pod being stopped reaches it: its sandbox's last IP even
        if the sandbox is no longer ready, the node's for a hostNetwork pod."""
        return self.node.ip if pod.spec.hostNetwork else (sandbox.ip if sandbox else "")

    async def _start_container(self, pod: Pod, rt: RuntimePod, spec: Container, attempt: int, init: bool,
                               sandbox_id: str, sb_config: cri.PodSandboxConfig, pod_ip: str, progress: _Progress,
                               volumes: dict[str, PodVolume], ephemeral: bool = False) -> tuple[str, str] | None:
        """Pull, create, start and run postStart for one container; (reason, message) on failure."""
        kind = "ephemeral_container" if ephemeral else "init_container" if init else "container"

        def on_pull(note: str) -> None:
            progress.pull_notes[spec.name] = note
            self._event(pod, "Normal", "Pulling", note)
            # Queued, not awaited: the pull starts now (one pull for every container that wants
            # the image), and the store's thread writes rows in the order they were asked for.
            row = self._runtime_row(pod, rt, {spec.name: ("ContainerCreating", note)}, ("", ""))
            self.store.submit(self._write_runtime, row).add_done_callback(_log_write_failure)

        try:
            # The image volumes first, as the kubelet: a container whose volume cannot be had
            # waits for it, whatever its own image.
            credentials = await self._pull_credentials(pod)
            mounted = await self.image_volumes.ensure(pod, spec, sb_config, on_pull, credentials)
            for volume in mounted:
                self._pulled(pod, progress, volume.reference, volume.image)
            image = await self.images.ensure(pod.uid, spec, sb_config, on_pull, credentials)
        except ImagePullError as exc:
            progress.pull_notes[spec.name] = exc.message
            if exc.reason == "ImagePullBackOff":
                self._event(pod, "Normal", "BackOff", exc.message)
            else:
                self._event(pod, "Warning", exc.event, exc.message)
                self._event(pod, "Warning", "Failed", f"Error: {exc.reason}")
            return exc.reason, exc.message
        except ImageVolumeUnsupported as exc:
            return self._start_failed(pod, kind, "CreateContainerConfigError", "CreateContainerConfigError", str(exc))
        self._pulled(pod, progress, spec.image, image)
        progress.pull_notes[spec.name] = image.note
        try:
            image_user = await self.images.status(image.ref) if needs_image_user(pod, spec) else None
            check_run_as_non_root(pod, spec, image_user)
            target_id = _target_id(spec, rt, sandbox_id) if ephemeral else None
            objects = await self.env_source.gather(pod, spec)
            config = container_config(pod, spec, attempt, image.ref, init, pod_ip, self.node, volumes, objects,
                                      warn=lambda reason, message: self._event(pod, "Warning", reason, message),
                                      etc_hosts=self._etc_hosts(pod, spec, pod_ip), subpaths=self.subpaths,
                                      target_id=target_id, cpuset=self.cpus.cpuset_for(pod.uid, spec.name),
                                      images={volume.volume: volume.spec for volume in mounted},
                                      rro_supported=await self._runtime_makes_rro_mounts(spec))
            user_namespaces.share_user_namespace(config, sb_config)
        except (ValueError, EnvSourceError) as exc:
            return self._start_failed(pod, kind, "CreateContainerConfigError", "CreateContainerConfigError", str(exc))
        except Exception as exc:  # a defect; the pod still says which container and why
            log.exception("pod %s: building the config of container %s", pod.full_name, spec.name)
            return self._start_failed(pod, kind, "CreateContainerConfigError", "CreateContainerConfigError",
                                      f"internal error building the container config: {type(exc).__name__}: {exc}")
        M.STARTED_CONTAINERS.labels(kind).inc()
        try:
            cid = await self.runtime.create_container(sandbox_id, config, sb_config)
        except CRIError as exc:
            _count_image_volume_mounts(spec, mounted, exc.details)
            return self._start_failed(pod, kind, _grpc_code(exc), "CreateContainerError", exc.details)
        _count_image_volume_mounts(spec, mounted, "")
        self._event(pod, "Normal", "Created", f"Created container {spec.name}")
        try:
            await self.runtime.start_container(cid)
        except CRIError as exc:
            return self._start_failed(pod, kind, _grpc_code(exc), "RunContainerError", exc.details)
        self._event(pod, "Normal", "Started", f"Started container {spec.name}")
        progress.started_any = True
        log.info("pod %s: container %s started (restart %d)", pod.full_name, spec.name, attempt)
        if spec.lifecycle and spec.lifecycle.postStart:
            failure = await self._post_start(pod, spec, cid, pod_ip)
            if failure:
                return failure
        return None

    def _pulled(self, pod: Pod, progress: _Progress, name: str, image: EnsuredImage) -> None:
        """The Pulled event of an image had (a container's or an image volume's), and its pull time."""
        self._event(pod, "Normal", "Pulled",
                    f'Container image "{name}" already present on machine and can be accessed by the pod'
                    if image.pulled_seconds is None
                    else f'Successfully pulled image "{name}" in {image.pulled_seconds:.3f}s')
        progress.pull_seconds += image.pulled_seconds or 0.0

    def _start_failed(self, pod: Pod, kind: str, metric_code: str, reason: str, message: str) -> tuple[str, str]:
        """A container that could not be started: counted, said in an event, and its waiting
        (reason, message)."""
        M.STARTED_CONTAINER_ERRORS.labels(metric_code, kind).inc()
        self._event(pod, "Warning", "Failed", f"Error: {message}")
        return reason, message

    def _etc_hosts(self, pod: Pod, spec: Container, pod_ip: str) -> Path | None:
        """Write the pod's managed /etc/hosts for this container, or None when it gets none."""
        ip = pod_ip
        if not wants_managed_hosts(spec, ip):
            return None
        node_hosts = node_hosts_file() if pod.spec.hostNetwork else None
        content = hosts_content(pod, ip, pod_hostname(pod), self.settings.kubelet.cluster_domain, node_hosts)
        try:
            return write_hosts_file(beneath(self.node.pods_dir, pod.uid), content)
        except OSError as exc:
            raise ValueError(f"cannot write the pod's /etc/hosts: {exc}") from None

    async def _post_start(self, pod: Pod, spec: Container, cid: str, pod_ip: str) -> tuple[str, str] | None:
        """A failed postStart hook kills the container, which then restarts per restartPolicy."""
        hook = spec.lifecycle.postStart if spec.lifecycle is not None else None
        if hook is None:
            return None
        try:
            await asyncio.wait_for(run_hook(self.runtime, hook, spec, cid, pod_ip,
                                            POST_START_HOOK_TIMEOUT), POST_START_HOOK_TIMEOUT)
            return None
        except (HookFailed, asyncio.TimeoutError) as exc:
            message = f"FailedPostStartHook: {exc or 'timed out'}"
            log.warning("pod %s: container %s: %s", pod.full_name, spec.name, message)
            self._event(pod, "Warning", "FailedPostStartHook", str(exc or "timed out"))
        info = next((c for c in (await get_runtime_pod(self.runtime, pod.uid)).containers if c.id == cid), None)
        if info is not None:
            await self.killer.kill_container(info, None, pod_ip,
                                             time.monotonic() + pod.spec.terminationGracePeriodSeconds,
                                             reason=message, pod=pod)
        return "PostStartHookError", message

    async def _collect_garbage(self, pod: Pod, rt: RuntimePod) -> None:
        """The kubelet's per-pod GC: keep one dead instance per container (for lastState), two
        while the newest has stopped too (it is the state, the one before it the lastState: an
        init container run again for RestartAllContainers), and drop dead sandboxes once the
        current one has every container."""
        for name in {c.name for c in rt.containers}:
            history = rt.history(name)
            dead = [c for c in history if c.state == "exited"]
            for c in dead[2 if history[0].state == "exited" else 1:]:
                await self._remove_container(c.id)
                self.killer.forget([c.id])
        current = rt.current_sandbox
        if current is None or not current.ready:
            return
        names = {c.name for c in pod.spec.initContainers + pod.spec.containers}
        in_current = {c.name for c in rt.containers if c.sandbox_id == current.id}
        if names - in_current:
            return
        for sb in rt.sandboxes[1:]:
            if sb.ready:
                continue
            for c in [c for c in rt.containers if c.sandbox_id == sb.id]:
                await self._remove_container(c.id)
            await self.runtime.remove_pod_sandbox(sb.id)

    async def _remove_container(self, cid: str) -> None:
        try:
            await self.runtime.remove_container(cid)
        except CRIError as exc:
            if not exc.not_found:
                raise

    async def _terminate(self, uid: str, row: DesiredPod | None, rt: RuntimePod) -> SyncResult:
        pod = Pod.from_manifest(row.manifest) if row is not None else None
        grace = row.grace_period_seconds if row else _grace_from_runtime(rt)
        if not rt.empty:
            log.info("pod %s: stopping (grace period %ds)", pod.full_name if pod else uid, grace)
            sb = rt.current_sandbox
            await self.killer.kill_sandboxes(pod, rt, [s.id for s in rt.sandboxes], grace,
                                             sb.ip if sb else "")
            for c in rt.containers:
                await self._remove_container(c.id)
            self.killer.forget([c.id for c in rt.containers])
            for s in rt.sandboxes:
                await self.runtime.remove_pod_sandbox(s.id)
        if pod is not None:
            parent = pod_cgroup_parent(pod, qos_class(pod), self.node.kubepods)
            await asyncio.to_thread(remove_pod_cgroups, parent, self.node.cgroup_slices)
            await self.update_qos_tiers()
        # Only pod-sync's own files; the pod directory (with its volumes) is the volume service's to
        # remove, once it has unmounted them. Its logs stay a while for a last look (pod_logs_gc).
        try:
            # In a thread: the termination logs are as large as the containers made them.
            await asyncio.to_thread(shutil.rmtree, beneath(self.node.pods_dir, uid, "containers"), ignore_errors=True)
        except UnsafePath as exc:  # a UID is checked where it enters; this is the last line
            log.error("pod %s: not removing its files: %s", uid, exc)
        self.backoff.forget(f"{uid}/")
        self.images.forget(uid)
        self._progress.pop(uid, None)
        self._pods.forget(uid)
        self._recorded.pop(uid, None)
        await self.store.run(self._write_terminated, uid, row)
        return SyncResult(gone=True)

    def _write_terminated(self, uid: str, row: DesiredPod | None) -> None:
        with self.store.session() as s:
            s.execute(delete(PodRuntime).where(PodRuntime.uid == uid))
            if row is not None and row.source == "api" and not row.api_deleted:
                # The API object stays until status-reporter deletes it; it needs to know
                # nothing runs any more.
                if (stored := s.get(DesiredPod, uid)) is not None:
                    stored.terminated = True
            elif row is not None:
                s.execute(delete(DesiredPod).where(DesiredPod.uid == uid))

    # -- recording ---------------------------------------------------------------------------

    async def _record(self, pod: Pod, rt: RuntimePod, waiting: dict[str, tuple[str, str]],
                      error: tuple[str, str], resize: ResizeState | None = None) -> None:
        """Store what the pod runs. resize: the pod's resize state as this sync left it (read
        from the store when None)."""
        row = self._runtime_row(pod, rt, waiting, error, resize)
        said = _runtime_content(row)
        if self._recorded.get(pod.uid) == said:
            return
        # On the store's thread: the write may wait out another service's lock on the store.
        await self.store.run(self._write_runtime, row)
        self._recorded[pod.uid] = said

    def _runtime_row(self, pod: Pod, rt: RuntimePod, waiting: dict[str, tuple[str, str]],
                     error: tuple[str, str], resize: ResizeState | None = None) -> PodRuntime:
        sb = rt.current_sandbox
        log_dir = L.pod_log_dir(self.settings.kubelet.pod_logs_dir, pod.metadata.namespace,
                                pod.metadata.name, pod.uid)
        progress = self._progress.get(pod.uid)
        pod_ip = self._pod_ip(pod, sb)
        if resize is None:
            with self.store.session() as s:
                desired = s.get(DesiredPod, pod.uid)
                resize = ResizeState.of(desired, pod) if desired is not None and desired.admitted else None
        containers = observed_containers(pod, rt, waiting, log_dir, self.killer.reasons,
                                         progress.pull_notes if progress else {}, resize,
                                         progress.restarted_all_at if progress else None)
        return PodRuntime(uid=pod.uid, sandbox_id=sb.id if sb else "", sandbox_ready=bool(sb and sb.ready),
                          pod_ip=pod_ip, log_dir=log_dir, containers=containers,
                          sync_error_reason=error[0], sync_error_message=error[1],
                          observed_generation=generation(pod),
                          resize_conditions=resize.conditions() if resize else [],
                          pod_resources=dict(self._pod_resources(pod, resize)), updated_at=utcnow())

    def _pod_resources(self, pod: Pod, resize: ResizeState | None) -> PodResources:
        """The pod-level resources of its status: while a resize is under way, as its pod cgroup
        has them now; otherwise as pod-sync set them (pod_resources_status.py)."""
        node = self.node
        cgroup = None
        if resize is not None and resize.in_progress is not None:
            parent = pod_cgroup_parent(pod, qos_class(pod), node.kubepods)
            cgroup = pod_cgroup.current(parent, node.cgroup_root, node.cgroup_slices)
        return pod_resources(pod, cgroup or pod_cgroup.pod_cgroup_config(pod, cfs_quota=node.cpu_cfs_quota,
                                                                          cpu_period=node.cpu_cfs_period))

    def _write_runtime(self, row: PodRuntime) -> None:
        with self.store.session() as s:
            s.merge(row)

    def _observe_start(self, pod: Pod, rt: RuntimePod, progress: _Progress) -> None:
        """Pod start latency, once per pod, for pods this process started."""
        if not progress.started_any:
            return
        if all((c := rt.latest(spec.name)) and c.state == "running" for spec in pod.spec.containers):
            took = time.time() - progress.seen_at
            M.POD_START_DURATION.observe(took)
            M.POD_START_SLI_DURATION.observe(max(0.0, took - progress.pull_seconds))
            progress.started_any = False


def _runtime_content(row: PodRuntime) -> tuple[object, ...]:
    """What a runtime row says, without when it was written."""
    return (row.sandbox_id, row.sandbox_ready, row.pod_ip, row.log_dir, row.containers, row.sync_error_reason,
            row.sync_error_message, row.observed_generation, row.resize_conditions, row.pod_resources)


def _count_image_volume_mounts(spec: Container, mounted: list[MountedImage], create_error: str) -> None:
    """The kubelet's image volume counters, for one container's create: containerd says
    ImageVolumeMountFailed (CRI's error) when it could not mount an image."""
    if not mounted:
        return
    M.IMAGE_VOLUME_REQUESTED.inc(len(mounted))
    mounts = sum(1 for m in spec.volumeMounts if m.name in {v.volume for v in mounted})
    failed = create_error.startswith(IMAGE_VOLUME_MOUNT_FAILED)
    (M.IMAGE_VOLUME_MOUNT_ERRORS if failed else M.IMAGE_VOLUME_MOUNTED).inc(mounts)


def _log_write_failure(write: Future[None]) -> None:
    if (exc := write.exception()) is not None:
        log.warning("could not store a pod's pull progress: %s", exc)


def _grpc_code(exc: CRIError) -> str:
    """The gRPC status code's name, as the kubelet's started_containers_errors_total labels it."""
    return exc.code.name if exc.code else "Unknown"


def _target_id(spec: Container, rt: RuntimePod, sandbox_id: str) -> str | None:
    """The container whose process namespace an ephemeral container joins (targetContainerName):
    its latest instance in the pod's sandbox, as the kubelet resolves it."""
    target = getattr(spec, "targetContainerName", None)
    if not target:
        return None
    found = rt.latest(target)
    if found is None or found.sandbox_id != sandbox_id:
        raise ValueError(f"unable to find target container {target}")
    return found.id


def _grace_from_runtime(rt: RuntimePod) -> int:
    for c in rt.containers:
        value = c.annotations.get(L.TERMINATION_GRACE)
        if value and value.isdigit():
            return int(value)
    return 30
