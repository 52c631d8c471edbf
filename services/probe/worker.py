"""One worker per (pod, container, probe kind), with the kubelet's result rules (prober/worker.go).

Initial results: readiness Failure, liveness Success, startup Unknown. A result changes only after
failureThreshold consecutive failures or successThreshold consecutive successes. A failed liveness
or startup probe holds the worker until the container is replaced (pod-sync kills it). While a
startup probe has not succeeded, liveness and readiness do not run.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from prometheus_client import Counter, Histogram

from services.probe import probers
from shared.model.podspec import Container, Probe
from shared.model.probe_state import ProbeState
from shared.runtime.cri import RuntimeService

log = logging.getLogger(__name__)

SUCCESS, FAILURE, UNKNOWN = ProbeState.SUCCESS, ProbeState.FAILURE, ProbeState.UNKNOWN
INITIAL = {"readiness": FAILURE, "liveness": SUCCESS, "startup": UNKNOWN}
_LABELS = ["probe_type", "container", "pod", "namespace"]
PROBE_TOTAL = Counter("prober_probe_total", "Cumulative number of a liveness, readiness or startup probe "
                      "for a container by result.", _LABELS + ["result", "pod_uid"])
PROBE_DURATION = Histogram("prober_probe_duration_seconds", "Duration in seconds for a probe response.",
                           _LABELS)
_RESULT_LABEL = {probers.SUCCESS: "successful", probers.WARNING: "successful", probers.FAILURE: "failed"}


# Probes start on a grid of this many seconds: the ones due within the same slot run in one pass
# of the event loop (their timers share a deadline), so 600 probes/s wake the loop about 50 times
# a second instead of more than 600 (a third less CPU for the probe service). A probe starts at
# most this late; periods are whole seconds.
START_GRID = 0.02


def _on_grid(t: float) -> float:
    return math.ceil(t / START_GRID) * START_GRID


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    """asyncio.sleep to an exact loop time (sleep takes a delay, measured from a moment later)."""
    woken = loop.create_future()
    timer = loop.call_at(when, _wake, woken)
    try:
        await woken
    finally:
        timer.cancel()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True)
class ProbeKey:
    pod_uid: str
    namespace: str
    pod_name: str
    container: str
    kind: str  # liveness, readiness, startup


@dataclass
class Target:
    """The container instance a worker probes right now."""

    container_id: str
    running: bool
    started_at: float
    pod_ip: str


ResultSink = Callable[[ProbeKey, str, str, str], Awaitable[None]]  # key, container id, result, message


class ProbeWorker:
    def __init__(self, key: ProbeKey, container: Container, probe: Probe, runtime: RuntimeService,
                 sink: ResultSink, startup_done: Callable[[], bool],
                 resumed: tuple[str, str] | None = None,
                 on_failure: Callable[[ProbeKey, str], None] | None = None,
                 on_warning: Callable[[ProbeKey, str], None] | None = None) -> None:
        self.key = key
        self.container = container
        self.probe = probe
        self.runtime = runtime
        self.sink = sink
        self.startup_done = startup_done
        self.on_failure = on_failure  # every failed run is an Unhealthy event, as in the kubelet
        self.on_warning = on_warning  # every run that passed with a warning is a ProbeWarning event
        self.target: Target | None = None
        self.result = INITIAL[key.kind]
        self.container_id = ""
        self._resumed = resumed  # (container id, result) found in the store at start
        self._last_raw = ""
        self._run_count = 0
        self.on_hold = False
        self.last_failure = ""  # what the last failed run said, for the admin view
        self._labels = (key.kind.capitalize(), key.container, key.pod_name, key.namespace)
        # Its counters, looked up once: their series carry the pod UID, so they are this worker's
        # alone (the duration's are not: a pod recreated under the same name shares them).
        self._total = {result: PROBE_TOTAL.labels(*self._labels, result, key.pod_uid)
                       for result in ("successful", "failed")}

    def set_target(self, target: Target | None) -> None:
        if target is not None and target.container_id != self.container_id:
            self.container_id = target.container_id
            self._last_raw, self._run_count, self.on_hold = "", 0, False
            if self._resumed and self._resumed[0] == target.container_id and \
                    self._resumed[1] in ProbeState.__members__.values():
                # A probe-service restart: keep what was known, so readiness does not flap.
                self.result = ProbeState(self._resumed[1])
                self.on_hold = self.key.kind != "readiness" and self.result == FAILURE
            else:
                self.result = INITIAL[self.key.kind]
            self._resumed = None
        self.target = target

    async def _set(self, result: ProbeState, message: str = "") -> None:
        if result != self.result:
            self.result = result
            await self.sink(self.key, self.container_id, result, message)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # Jitter the first run so workers created together do not probe in lockstep.
        due = loop.time() + random.uniform(0, self.probe.periodSeconds)
        while True:
            await _sleep_until(loop, _on_grid(due))
            try:
                await self.probe_once()
            except Exception:
                log.exception("probe %s failed unexpectedly", self.key)
            # A fixed rate, like the kubelet's ticker: the probe's own time does not stretch the
            # period. A probe that overran its slot starts the next one right away, then resyncs.
            due += self.probe.periodSeconds
            due = max(due, loop.time())

    async def probe_once(self) -> None:
        t = self.target
        if t is None or not t.running:
            if self.key.kind == "readiness":
                await self._set(FAILURE)
            return
        if self.on_hold:
            return
        if self.key.kind == "startup" and self.result == SUCCESS:
            return  # a startup probe is done once it succeeded
        if self.key.kind != "startup" and not self.startup_done():
            return
        if time.time() - t.started_at < self.probe.initialDelaySeconds:
            return
        start = time.monotonic()
        outcome = await self._run_probe(t)
        PROBE_DURATION.labels(*self._labels).observe(time.monotonic() - start)
        self._total[_RESULT_LABEL[outcome.result]].inc()
        if outcome.result == probers.WARNING:
            log.warning("%s probe of %s/%s: %s", self.key.kind, self.key.pod_name, self.key.container,
                        outcome.output[:200])
            if self.on_warning is not None:
                self.on_warning(self.key, outcome.output.strip()[:1024])
        raw = SUCCESS if outcome.ok else FAILURE
        self.last_failure = outcome.output.strip()[:1024] if raw == FAILURE else ""
        if raw == FAILURE and self.on_failure is not None:
            self.on_failure(self.key, self.last_failure)
        self._run_count = self._run_count + 1 if raw == self._last_raw else 1
        self._last_raw = raw
        threshold = self.probe.failureThreshold if raw == FAILURE else self.probe.successThreshold
        if self._run_count < threshold:
            return
        await self._set(raw, outcome.output.strip()[:1024] if raw == FAILURE else "")
        if raw == FAILURE and self.key.kind in ("liveness", "startup"):
            self.on_hold = True  # until pod-sync replaces the container
            self._run_count = 0

    async def _run_probe(self, t: Target) -> probers.Outcome:
        try:
            return await self._dispatch(t)
        except ValueError as exc:  # a bad named port: the probe fails and says why
            return probers.Outcome(probers.FAILURE, str(exc))

    async def _dispatch(self, t: Target) -> probers.Outcome:
        p = self.probe
        timeout = float(p.timeoutSeconds)
        if p.exec is not None:
            return await probers.exec_probe(self.runtime, t.container_id, p.exec.command, timeout)
        if p.httpGet is not None:
            g = p.httpGet
            return await probers.http_probe(g.scheme.lower(), g.host or t.pod_ip, self._port(g.port), g.path,
                                            {h.name: h.value for h in g.httpHeaders}, timeout)
        if p.tcpSocket is not None:
            return await probers.tcp_probe(p.tcpSocket.host or t.pod_ip, self._port(p.tcpSocket.port), timeout)
        assert p.grpc is not None  # a probe has exactly one handler (shared/model/podspec.py)
        return await probers.grpc_probe(t.pod_ip, p.grpc.port, p.grpc.service, timeout)

    def _port(self, port: int | str) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for cp in self.container.ports:
            if cp.name == port:
                return cp.containerPort
        raise ValueError(f"port {port!r} is not a named port of container {self.container.name}")

    def forget_metrics(self) -> None:
        labels = (self.key.kind.capitalize(), self.key.container, self.key.pod_name, self.key.namespace)
        for result in ("successful", "failed", "unknown"):
            try:
                PROBE_TOTAL.remove(*labels, result, self.key.pod_uid)
            except KeyError:
                pass
        try:
            PROBE_DURATION.remove(*labels)
        except KeyError:
            pass
