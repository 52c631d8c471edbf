"""Syncing one pod: read what it should be, look at the runtime, act, record what is there now."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sqlalchemy import delete, select

from shared.cri import labels as L
from services.pod_sync.actions import PodActions, compute_pod_actions
from services.pod_sync.backoff import Backoff
from services.pod_sync.images import ImageManager, ImagePullError
from services.pod_sync.observed import observed_containers
from services.pod_sync.runtime_config import container_config, sandbox_config
from services.pod_sync.runtime_view import RuntimePod, get_runtime_pod
from shared.config import NodeSettings
from shared.cri import CRIError, RuntimeService
from shared.podspec import Pod
from shared.store import DesiredPod, NetworkStatus, PodRuntime, Store
from shared.store.models import utcnow

log = logging.getLogger(__name__)

# A failed sync (runtime error, network not ready) is retried after this long.
ERROR_RETRY = 2.0


@dataclass
class SyncResult:
    # Sync again after this many seconds even if nothing else happens (a back-off ending).
    requeue_after: float | None = None
    gone: bool = False  # the pod is fully removed


class PodSyncer:
    def __init__(self, runtime: RuntimeService, images: ImageManager, store: Store,
                 settings: NodeSettings, crash_backoff: Backoff) -> None:
        self.runtime = runtime
        self.images = images
        self.store = store
        self.settings = settings
        self.backoff = crash_backoff

    def _desired(self, uid: str) -> DesiredPod | None:
        with self.store.session() as s:
            return s.get(DesiredPod, uid)

    def _network_ready(self) -> tuple[bool, str]:
        with self.store.session() as s:
            row = s.get(NetworkStatus, 1)
        if row is None:
            return False, "network plugin not ready: the network service has not reported yet"
        return row.ready, row.message

    async def sync(self, uid: str) -> SyncResult:
        row = self._desired(uid)
        rt = await get_runtime_pod(self.runtime, uid)
        if row is None or row.deleting:
            return await self._terminate(uid, row, rt)
        pod = Pod.from_manifest(row.manifest)
        actions = compute_pod_actions(pod, rt, self.backoff)
        waiting = dict(actions.waiting)
        error = ("", "")
        requeue: float | None = None

        if actions.kill_sandboxes:
            await self._kill_sandboxes(rt, actions.kill_sandboxes, pod.spec.terminationGracePeriodSeconds)
        for cid in actions.remove_containers:
            await self._remove_container(cid)

        sandbox = rt.current_sandbox
        sandbox_id = sandbox.id if sandbox and sandbox.ready and not actions.create_sandbox else ""
        pod_ip = sandbox.ip if sandbox_id and sandbox else ""
        attempt = actions.sandbox_attempt if actions.create_sandbox else (sandbox.attempt if sandbox else 0)
        sb_config = sandbox_config(pod, attempt, self.settings)

        if actions.create_sandbox:
            sandbox_id, pod_ip, error = await self._create_sandbox(pod, sb_config)
            if error[0]:
                requeue = ERROR_RETRY

        if sandbox_id and actions.start:
            results = await asyncio.gather(*(
                self._start_container(pod, s.spec, s.attempt, s.init, sandbox_id, sb_config, pod_ip)
                for s in actions.start))
            for start, failure in zip(actions.start, results):
                if failure:
                    waiting[start.spec.name] = failure
                    requeue = ERROR_RETRY
        if any(r == "CrashLoopBackOff" for r, _ in waiting.values()):
            remaining = [self.backoff.remaining(f"{uid}/{name}", c.finished_at)
                         for name in waiting if (c := rt.latest(name))]
            wait = min((r for r in remaining if r > 0), default=ERROR_RETRY)
            requeue = min(requeue or wait, wait)

        fresh = await get_runtime_pod(self.runtime, uid) if not actions.noop else rt
        self._record(pod, fresh, waiting, error)
        return SyncResult(requeue_after=requeue)

    async def _create_sandbox(self, pod: Pod, config) -> tuple[str, str, tuple[str, str]]:
        if not pod.spec.hostNetwork:
            ready, message = self._network_ready()
            if not ready:
                return "", "", ("NetworkNotReady", f"network is not ready: {message}")
        try:
            sandbox_id = await self.runtime.run_pod_sandbox(config)
        except CRIError as exc:
            log.warning("pod %s: sandbox failed: %s", pod.full_name, exc)
            return "", "", ("FailedCreatePodSandBox", f"Failed to create pod sandbox: {exc.details}")
        log.info("pod %s: sandbox %s started (attempt %d)", pod.full_name, sandbox_id[:13],
                 config.metadata.attempt)
        status = await self.runtime.pod_sandbox_status(sandbox_id)
        return sandbox_id, status.network.ip, ("", "")

    async def _start_container(self, pod: Pod, spec, attempt: int, init: bool, sandbox_id: str,
                               sb_config, pod_ip: str) -> tuple[str, str] | None:
        """Pull, create and start one container; return (reason, message) when it fails."""
        try:
            image_ref = await self.images.ensure(pod.uid, spec, sb_config)
        except ImagePullError as exc:
            return exc.reason, exc.message
        try:
            config = container_config(pod, spec, attempt, image_ref, init, pod_ip, self.settings)
        except ValueError as exc:
            return "CreateContainerConfigError", str(exc)
        try:
            cid = await self.runtime.create_container(sandbox_id, config, sb_config)
        except CRIError as exc:
            return "CreateContainerError", exc.details
        try:
            await self.runtime.start_container(cid)
        except CRIError as exc:
            return "RunContainerError", exc.details
        log.info("pod %s: container %s started (restart %d)", pod.full_name, spec.name, attempt)
        await self._prune_dead(pod.uid, spec.name)
        return None

    async def _prune_dead(self, uid: str, name: str) -> None:
        """Keep one dead instance per container (the kubelet's default) for lastState."""
        rt = await get_runtime_pod(self.runtime, uid)
        dead = [c for c in rt.history(name) if c.state == "exited"]
        for c in dead[1:]:
            await self._remove_container(c.id)

    async def _remove_container(self, cid: str) -> None:
        try:
            await self.runtime.remove_container(cid)
        except CRIError as exc:
            if not exc.not_found:
                raise

    async def _stop_container(self, cid: str, grace: int) -> None:
        try:
            await self.runtime.stop_container(cid, grace)
        except CRIError as exc:
            if not exc.not_found:
                raise

    async def _kill_sandboxes(self, rt: RuntimePod, sandbox_ids: list[str], grace: int) -> None:
        """Stop the sandboxes' containers in parallel within the grace period, then the sandboxes."""
        running = [c for c in rt.running_containers if c.sandbox_id in sandbox_ids]
        await asyncio.gather(*(self._stop_container(c.id, grace) for c in running))
        for sid in sandbox_ids:
            await self.runtime.stop_pod_sandbox(sid)

    async def _terminate(self, uid: str, row: DesiredPod | None, rt: RuntimePod) -> SyncResult:
        grace = row.grace_period_seconds if row else _grace_from_runtime(rt)
        if not rt.empty:
            log.info("pod %s: stopping (grace period %ds)", uid, grace)
            await self._kill_sandboxes(rt, [s.id for s in rt.sandboxes], grace)
            for c in rt.containers:
                await self._remove_container(c.id)
            for s in rt.sandboxes:
                await self.runtime.remove_pod_sandbox(s.id)
        self.backoff.forget(f"{uid}/")
        self.images.forget(uid)
        with self.store.session() as s:
            s.execute(delete(PodRuntime).where(PodRuntime.uid == uid))
            if row is not None:
                s.execute(delete(DesiredPod).where(DesiredPod.uid == uid))
        return SyncResult(gone=True)

    def _record(self, pod: Pod, rt: RuntimePod, waiting: dict[str, tuple[str, str]],
                error: tuple[str, str]) -> None:
        sb = rt.current_sandbox
        log_dir = L.pod_log_dir(self.settings.kubelet.pod_logs_dir, pod.metadata.namespace,
                                pod.metadata.name, pod.uid)
        row = PodRuntime(
            uid=pod.uid,
            sandbox_id=sb.id if sb else "",
            sandbox_ready=bool(sb and sb.ready),
            pod_ip=sb.ip if sb and sb.ready else "",
            log_dir=log_dir,
            containers=observed_containers(pod, rt, waiting, log_dir),
            sync_error_reason=error[0],
            sync_error_message=error[1],
            updated_at=utcnow(),
        )
        with self.store.session() as s:
            s.merge(row)

    def desired_uids(self) -> list[str]:
        with self.store.session() as s:
            return list(s.scalars(select(DesiredPod.uid)))


def _grace_from_runtime(rt: RuntimePod) -> int:
    for c in rt.containers:
        value = c.annotations.get(L.TERMINATION_GRACE)
        if value and value.isdigit():
            return int(value)
    return 30
