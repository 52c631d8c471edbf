"""Stopping containers the kubelet's way: preStop first, then StopContainer with what is left of
the grace period; app containers in parallel, then sidecars in reverse start order, then the
sandbox."""

from __future__ import annotations

import asyncio
import logging
import math
import time

from services.pod_sync.hooks import HookFailed, run_hook
from services.pod_sync.runtime_view import ContainerInfo, RuntimePod
from shared.bus.events import Recorder
from shared.model.podspec import Container, Pod
from shared.runtime.cri import CRIError, RuntimeService
from shared.runtime.cri import labels as L

log = logging.getLogger(__name__)

# The kubelet never gives StopContainer less than this, even when preStop used up the budget.
MIN_GRACE = 2


class Killer:
    def __init__(self, runtime: RuntimeService, events: Recorder) -> None:
        self.runtime = runtime
        self.events = events
        # container ID -> why pykubelet killed it, shown as the terminated state's message
        self.reasons: dict[str, str] = {}

    async def kill_container(self, c: ContainerInfo, spec: Container | None, pod_ip: str,
                             deadline: float, reason: str = "", pod: Pod | None = None,
                             floor: int = MIN_GRACE) -> None:
        if reason:
            self.reasons[c.id] = reason
        if pod is not None and c.state == "running":
            self.events.pod(pod.metadata.namespace, pod.metadata.name, pod.uid, "Normal", "Killing",
                            f"Stopping container {c.name}")
        if spec is not None and spec.lifecycle and spec.lifecycle.preStop and c.state == "running":
            budget = deadline - time.monotonic()
            try:
                await asyncio.wait_for(run_hook(self.runtime, spec.lifecycle.preStop, spec, c.id, pod_ip, budget),
                                       max(0.1, budget))
            except (HookFailed, asyncio.TimeoutError) as exc:
                log.warning("container %s: preStop hook failed: %s", c.name, exc or "timed out")
        remaining = max(floor, math.ceil(deadline - time.monotonic()))
        try:
            await self.runtime.stop_container(c.id, remaining)
        except CRIError as exc:
            if not exc.not_found:
                raise

    async def kill_sandboxes(self, pod: Pod | None, rt: RuntimePod, sandbox_ids: list[str],
                             grace: int, pod_ip: str = "", reason: str = "", floor: int = MIN_GRACE) -> None:
        """floor: the least time StopContainer gets (0 only when the pod must go at once)."""
        deadline = time.monotonic() + grace
        specs = {c.name: c for c in pod.spec.all_containers} if pod else {}
        running = [c for c in rt.running_containers if c.sandbox_id in sandbox_ids]
        apps = [c for c in running if c.annotations.get(L.INIT_CONTAINER) != "true"]
        sidecars = [c for c in running if c.annotations.get(L.INIT_CONTAINER) == "true"]
        await asyncio.gather(*(self.kill_container(c, specs.get(c.name), pod_ip, deadline, reason, pod, floor)
                               for c in apps))
        order = [c.name for c in pod.spec.initContainers] if pod else []
        sidecars.sort(key=lambda c: order.index(c.name) if c.name in order else -1, reverse=True)
        for c in sidecars:
            await self.kill_container(c, specs.get(c.name), pod_ip, deadline, reason, pod, floor)
        for sid in sandbox_ids:
            await self.runtime.stop_pod_sandbox(sid)

    def forget(self, container_ids: list[str]) -> None:
        for cid in container_ids:
            self.reasons.pop(cid, None)
