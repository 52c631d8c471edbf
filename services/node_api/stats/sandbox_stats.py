"""Pod sandbox stats (CRI ListPodSandboxStats), sampled in the background like cAdvisor's
housekeeping instead of once per request.

containerd answers ListPodSandboxStats by asking every pod's shim and reading every pod's network
namespace: a second at 100 pods, five at 250 on a 2-core node. The kubelet never waits for that on
a request either: its stats come from cAdvisor's cache, refreshed every housekeeping interval
(10 s). Here a request is served the latest sample; one older than `interval` also starts a
refresh the request does not wait for, and only a sample older than `stale` (or none) is waited
for. While requests keep coming, a named background task refreshes the sample every interval/2.
A node nobody scrapes pays nothing: the task stops after `idle` seconds without a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Protocol

import grpc
from cri_api.v1 import api_pb2 as cri

from shared.runtime.cri.client import CRIError

log = logging.getLogger(__name__)

# cAdvisor's default housekeeping interval: what the kubelet's pod stats lag by at most.
HOUSEKEEPING_INTERVAL = 10.0
# A sample this old is not served: the request waits for a new one (the first after a quiet spell).
STALE_AFTER = 3 * HOUSEKEEPING_INTERVAL
# The background refresh stops this long after the last request.
IDLE_AFTER = 120.0
# How long an UNIMPLEMENTED ListPodSandboxStats is believed before asking again (runtime upgrade).
UNIMPLEMENTED_RECHECK = 600.0

Sample = dict[str, cri.PodSandboxStats]


class SandboxStatsSource(Protocol):
    async def list_pod_sandbox_stats(self) -> list[cri.PodSandboxStats]: ...


class SandboxStatsCache:
    """The latest ListPodSandboxStats sample by sandbox id; None when the runtime has none."""

    def __init__(self, runtime: SandboxStatsSource, *, interval: float = HOUSEKEEPING_INTERVAL,
                 stale: float = STALE_AFTER, idle: float = IDLE_AFTER,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.interval = interval
        self.stale = max(stale, interval)
        self.idle = idle
        self._clock = clock
        self._sample: Sample | None = None
        self._taken_at = float("-inf")
        self._last_request = float("-inf")
        self._unimplemented_at: float | None = None
        self._inflight: asyncio.Task[Sample | None] | None = None
        self._refresher: asyncio.Task[None] | None = None

    async def get(self) -> Sample | None:
        now = self._clock()
        self._last_request = now
        if self._unimplemented_at is not None and now - self._unimplemented_at < UNIMPLEMENTED_RECHECK:
            return None
        age = now - self._taken_at
        if self._sample is None or age >= self.stale:
            sample = await self._refresh()
        else:
            sample = self._sample
            if age >= self.interval:
                self._start_refresh()
        if self._unimplemented_at is None:
            self._keep_fresh()
        return sample

    async def close(self) -> None:
        for task in (self._refresher, self._inflight):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass

    def _refresh(self) -> asyncio.Future[Sample | None]:
        """One ListPodSandboxStats at a time: concurrent callers share the call in flight."""
        return asyncio.shield(self._start_refresh())

    def _start_refresh(self) -> asyncio.Task[Sample | None]:
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.create_task(self._fetch(), name="node-api:sandbox-stats")
            self._inflight.add_done_callback(_log_failure)
        return self._inflight

    async def _fetch(self) -> Sample | None:
        started = self._clock()
        try:
            stats = await self.runtime.list_pod_sandbox_stats()
        except CRIError as exc:
            if exc.code == grpc.StatusCode.UNIMPLEMENTED:
                if self._unimplemented_at is None:
                    log.info("the runtime has no ListPodSandboxStats: pod CPU and memory are the sum of "
                             "their containers' and pod network stats are left out")
                self._unimplemented_at = self._clock()
            else:
                log.warning("pod sandbox stats: %s", exc)
            self._sample = None
            return None
        self._unimplemented_at = None
        self._sample = {s.attributes.id: s for s in stats}
        # The sample's age counts from when it was asked for: the runtime read the counters then.
        self._taken_at = started
        return self._sample

    def _keep_fresh(self) -> None:
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.create_task(self._refresh_loop(), name="node-api:sandbox-stats-refresh")
            self._refresher.add_done_callback(_log_failure)

    async def _refresh_loop(self) -> None:
        while self._clock() - self._last_request < self.idle:
            await asyncio.sleep(self.interval / 2)
            await self._refresh()
            if self._unimplemented_at is not None:
                return


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s failed: %r; the next stats request asks the runtime again",
                  task.get_name(), task.exception())
