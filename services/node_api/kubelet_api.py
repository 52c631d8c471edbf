"""The kubelet API's endpoints (what `kubectl logs/exec/attach/port-forward/top` and
`.../nodes/NAME/proxy/...` reach through the API server), on top of the small HTTP server.

Read-only toward the store and the runtime, except the streaming calls that hand out a URL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol

from cri_api.v1 import api_pb2 as cri

from services.node_api import logs, streaming
from services.node_api.debug_flags import (
    DEBUGGING_PATHS,
    DebugFlags,
    debugging_disabled,
    flags_disabled,
    profiling_disabled,
)
from services.node_api.debug_flags import MAX_BODY as FLAG_MAX_BODY
from services.node_api.debug_flags import PATH as FLAGS_PATH
from services.node_api.http import Connection, HTTPError, Request, Response, Router, json_response, text_response
from services.node_api.metrics_merge import CONTENT_TYPE as METRICS_CONTENT_TYPE
from services.node_api.metrics_merge import PROBES_FAMILIES, filter_families
from services.node_api.pods import PodRef, find_pod, pod_list
from services.node_api.stats.provider import StatsError
from services.node_api.system_logs import SystemLogs
from services.node_api.system_logs import disabled as logs_disabled
from shared.config.refused import REFUSED
from shared.config.settings import NodeSettings
from shared.model.container_id import runtime_container_id
from shared.model.durations import format_duration
from shared.runtime.cri import CRIError, RuntimeService, StreamingService
from shared.runtime.cri import labels as L
from shared.store import Store
from shared.store.observed import ContainerInstance, ObservedContainer


class Stats(Protocol):
    async def summary(self) -> dict[str, Any]: ...
    async def resource_metrics(self) -> bytes: ...
    async def cadvisor_metrics(self) -> bytes: ...
    def machine_spec(self) -> dict[str, Any]: ...


class Runtime(RuntimeService, StreamingService, Protocol):
    pass


# The node's /metrics: every service's exposition merged (services/node_api/metrics_merge.py).
NodeMetrics = Callable[[], Awaitable[str]]

# KubeletConfiguration fields held as seconds, shown as Go durations the way the kubelet's /configz does.
DURATION_FIELDS = {"syncFrequency", "fileCheckFrequency", "runtimeRequestTimeout", "nodeStatusUpdateFrequency",
                   "nodeStatusReportFrequency", "volumeStatsAggPeriod", "streamingConnectionIdleTimeout",
                   "cacheTTL", "cacheAuthorizedTTL", "cacheUnauthorizedTTL", "maxContainerRestartPeriod",
                   "initialContainerRestartPeriod", "flushFrequency", "containerLogMonitorInterval",
                   "cpuManagerReconcilePeriod", "evictionPressureTransitionPeriod", "httpCheckFrequency",
                   "imageMaximumGCAge", "imageMinimumGCAge", "shutdownGracePeriod", "shutdownGracePeriodCriticalPods",
                   "cpuCFSQuotaPeriod"}


def configz(settings: NodeSettings, serving_files: tuple[str, str] = ("", "")) -> dict[str, Any]:
    """The effective KubeletConfiguration, as the kubelet's /configz shows it: every field,
    those pykubelet refuses at anything but the kubelet's default with that default (the only
    value it runs with), and the serving certificate and key the kubelet API uses when the file
    names none (node-api's self-signed pair, as the kubelet fills them in)."""
    def render(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: format_duration(v) if k in DURATION_FIELDS and isinstance(v, (int, float)) else render(v)
                    for k, v in obj.items()}
        return obj
    refused = {name: field.default for name, field in REFUSED.items() if field.default is not None}
    shown = {**refused, **render(settings.kubelet.model_dump(by_alias=True))}
    if not shown.get("tlsCertFile") and all(serving_files):
        shown["tlsCertFile"], shown["tlsPrivateKeyFile"] = serving_files
    return {"kubeletconfig": shown}


def running_pod_list(sandboxes: list[cri.PodSandbox], containers: list[cri.Container]) -> dict[str, Any]:
    """The kubelet's runtime pods (kubecontainer.Pod.ToAPIPod) of the ready sandboxes and running
    containers that carry its labels, encoded as its legacy codec encodes a PodList."""
    pods: dict[str, dict[str, Any]] = {}

    def pod_of(labels: Any) -> dict[str, Any] | None:
        uid = labels.get(L.POD_UID, "")
        if not uid:
            return None  # not a kubelet's
        return pods.setdefault(uid, {"metadata": {"name": labels.get(L.POD_NAME, ""),
                                                  "namespace": labels.get(L.POD_NAMESPACE, ""), "uid": uid,
                                                  "creationTimestamp": None},
                                     "spec": {"containers": None}, "status": {}})
    for sb in sandboxes:
        if sb.state == cri.SANDBOX_READY:
            pod_of(sb.labels)
    for c in containers:
        pod = pod_of(c.labels) if c.state == cri.CONTAINER_RUNNING else None
        if pod is not None:
            pod["spec"]["containers"] = (pod["spec"]["containers"] or []) + [
                {"name": c.labels.get(L.CONTAINER_NAME, ""), "image": c.image.image, "resources": {}}]
    items = sorted(pods.values(), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items or None}


@dataclass
class KubeletAPI:
    settings: NodeSettings
    store: Store
    runtime: Runtime
    stats: Stats
    node_metrics: NodeMetrics
    # The self-signed serving certificate and key in use when the config names none (/configz).
    serving_files: tuple[str, str] = ("", "")
    node_logs: SystemLogs = field(default_factory=SystemLogs)  # /logs/: the node's /var/log
    debug_flags: DebugFlags | None = None  # /debug/flags/v; None: the endpoint answers "disabled"

    def routes(self, read_only: bool = False) -> Router:
        """All endpoints; the read-only port gets only those that reveal no container data.
        None takes a request body (/run takes its command in the query, as the kubelet's does),
        so a request that brings one is refused before it is read (Router.add's max_body)."""
        r = Router()
        r.add("GET", "/healthz", self.healthz)
        r.add("GET", "/pods", self.pods)
        r.add("GET", "/spec", self.spec)
        r.add("GET", "/stats/summary", self.summary)
        r.add("GET", "/metrics", self.metrics)
        r.add("GET", "/metrics/cadvisor", self.metrics_cadvisor)
        r.add("GET", "/metrics/resource", self.metrics_resource)
        r.add("GET", "/metrics/probes", self.metrics_probes)
        if read_only:
            return r
        r.add("GET", "/configz", self.configz)
        # Every method reaches these handlers, which answer as the kubelet's do.
        every = "GET HEAD POST PUT PATCH DELETE OPTIONS"
        if not self.settings.kubelet.enable_debugging_handlers:
            for prefix in DEBUGGING_PATHS:
                r.add(every, prefix, debugging_disabled)
                r.add(every, f"{prefix}/{{rest:*}}", debugging_disabled)
            return r
        r.add("GET", "/runningpods", self.running_pods)
        r.add("GET", "/containerLogs/{namespace}/{pod}/{container}", self.container_logs)
        if self.settings.kubelet.enable_system_log_handler:
            r.add("GET", "/logs/{logpath:*}", self.node_logs.serve)
        else:
            r.add("GET HEAD POST PUT PATCH DELETE OPTIONS", "/logs", logs_disabled)
            r.add("GET HEAD POST PUT PATCH DELETE OPTIONS", "/logs/{logpath:*}", logs_disabled)
        for verb, upgrade in (("exec", self.exec), ("attach", self.attach)):
            r.add("GET POST", f"/{verb}/{{namespace}}/{{pod}}/{{container}}", self.needs_upgrade, upgrade)
            r.add("GET POST", f"/{verb}/{{namespace}}/{{pod}}/{{uid}}/{{container}}", self.needs_upgrade, upgrade)
        r.add("GET POST", "/portForward/{namespace}/{pod}", self.needs_upgrade, self.port_forward)
        r.add("GET POST", "/portForward/{namespace}/{pod}/{uid}", self.needs_upgrade, self.port_forward)
        r.add("POST", "/run/{namespace}/{pod}/{container}", self.run)
        r.add("POST", "/run/{namespace}/{pod}/{uid}/{container}", self.run)
        if not self.settings.kubelet.enable_profiling_handler:
            r.add(every, "/debug/pprof/{rest:*}", profiling_disabled)
        # The handler answers every method but PUT as the kubelet's does (406).
        if self.debug_flags is not None and self.settings.kubelet.enable_debug_flags_handler:
            r.add(every, FLAGS_PATH, self.debug_flags.verbosity, max_body=FLAG_MAX_BODY)
        else:
            r.add(every, FLAGS_PATH, flags_disabled)
        return r

    # -- plain endpoints ------------------------------------------------------------------------

    async def healthz(self, req: Request) -> Response:
        return text_response("ok")

    async def pods(self, req: Request) -> Response:
        return json_response(pod_list(self.store))

    async def running_pods(self, req: Request) -> Response:
        """The pods the runtime runs (ready sandboxes, running containers), as the kubelet's
        /runningpods/ lists them: each pod's names and UID and its containers' names and images."""
        try:
            sandboxes = await self.runtime.list_pod_sandbox()
            containers = await self.runtime.list_containers()
        except CRIError as exc:
            raise HTTPError(500, str(exc)) from None
        return json_response(running_pod_list(sandboxes, containers))

    async def configz(self, req: Request) -> Response:
        return json_response(configz(self.settings, self.serving_files))

    async def spec(self, req: Request) -> Response:
        return json_response(self.stats.machine_spec())

    async def summary(self, req: Request) -> Response:
        try:
            return json_response(await self.stats.summary())
        except StatsError as exc:
            raise HTTPError(500, f"stats not available: {exc}") from None

    async def metrics(self, req: Request) -> Response:
        return Response(200, (await self.node_metrics()).encode(), METRICS_CONTENT_TYPE)

    async def metrics_probes(self, req: Request) -> Response:
        return Response(200, filter_families(await self.node_metrics(), PROBES_FAMILIES).encode(),
                        METRICS_CONTENT_TYPE)

    async def metrics_cadvisor(self, req: Request) -> Response:
        return Response(200, await self.stats.cadvisor_metrics(), METRICS_CONTENT_TYPE)

    async def metrics_resource(self, req: Request) -> Response:
        return Response(200, await self.stats.resource_metrics(), METRICS_CONTENT_TYPE)

    # -- logs -----------------------------------------------------------------------------------

    async def container_logs(self, req: Request) -> Response:
        try:
            opts = logs.parse_log_options(req.query)
        except logs.LogQueryError as exc:
            # 400 for undecodable and invalid values alike, naming the parameter (the kubelet
            # answers 422 "Invalid request." for the latter, which helps nobody).
            raise HTTPError(400, str(exc)) from None
        pod = find_pod(self.store, req.params["namespace"], req.params["pod"])
        name = req.params["container"]
        if name not in pod.spec_container_names():
            raise HTTPError(404, f'container "{name}" not found in pod "{pod.name}"')
        instance = log_instance(pod, name, opts.previous)
        cid = runtime_container_id(instance["container_id"])

        async def still_running() -> bool:
            try:
                return (await self.runtime.container_status(cid)).state == cri.CONTAINER_RUNNING
            except CRIError:
                return False

        path = Path(instance["log_path"]).resolve()
        if not path.is_relative_to(Path(self.settings.kubelet.pod_logs_dir).resolve()):
            # pod-sync's record names a file outside the log dir: never open it.
            raise HTTPError(500, f'log of container "{name}" is not under podLogsDir')
        try:
            body = logs.read_log(path, opts, still_running)
        except FileNotFoundError:
            raise HTTPError(404, f'log of container "{name}" in pod "{pod.name}" is gone '
                                 f'(the container was removed)') from None
        return Response(200, body, "text/plain; charset=utf-8")

    # -- streaming ------------------------------------------------------------------------------

    async def needs_upgrade(self, req: Request) -> Response:
        raise HTTPError(400, "Upgrade request required")

    def _pod(self, req: Request) -> PodRef:
        return find_pod(self.store, req.params["namespace"], req.params["pod"], req.params.get("uid"))

    async def _proxy(self, req: Request, conn: Connection, get_url: Callable[[], Awaitable[str]]) -> None:
        try:
            url = await get_url()
        except CRIError as exc:
            raise HTTPError(404 if exc.not_found else 500, exc.details) from None
        await streaming.proxy_upgrade(req, conn, url, self.settings.kubelet.streaming_connection_idle_timeout)

    async def exec(self, req: Request, conn: Connection) -> None:
        opts = streaming.stream_options(req, need_command=True)
        cid = self._pod(req).running_container_id(req.params["container"])
        request = cri.ExecRequest(container_id=cid, cmd=opts.command, tty=opts.tty, stdin=opts.stdin,
                                  stdout=opts.stdout, stderr=opts.stderr)
        await self._proxy(req, conn, lambda: self.runtime.exec(request))

    async def attach(self, req: Request, conn: Connection) -> None:
        opts = streaming.stream_options(req, need_command=False)
        cid = self._pod(req).running_container_id(req.params["container"])
        request = cri.AttachRequest(container_id=cid, tty=opts.tty, stdin=opts.stdin, stdout=opts.stdout,
                                    stderr=opts.stderr)
        await self._proxy(req, conn, lambda: self.runtime.attach(request))

    async def port_forward(self, req: Request, conn: Connection) -> None:
        pod = self._pod(req)
        if not pod.sandbox_id or not pod.sandbox_ready:
            raise HTTPError(404, f'pod not found ("{pod.name}_{pod.namespace}")')
        ports = []
        for p in req.query.get("port", []):
            if not p.isdigit() or not 0 < int(p) < 65536:
                raise HTTPError(400, f"port: {p!r} is not a port number")
            ports.append(int(p))
        await self._proxy(req, conn, lambda: self.runtime.port_forward(pod.sandbox_id, ports))

    async def run(self, req: Request) -> Response:
        cmd = (req.arg("cmd") or "").split()  # split on white space, as the kubelet does
        if not cmd:
            raise HTTPError(400, "cmd: a command is required")
        cid = self._pod(req).running_container_id(req.params["container"])
        try:
            result = await self.runtime.exec_sync(cid, cmd, self.settings.kubelet.runtime_request_timeout)
        except CRIError as exc:
            raise HTTPError(500, exc.details) from None
        return Response(200, result.stdout + result.stderr, "text/plain; charset=utf-8")


def log_instance(pod: PodRef, name: str, previous: bool) -> ContainerInstance:
    """Which instance's log file to read, with the kubelet's answers when there is none."""
    entry: ObservedContainer = pod.container(name) or {}
    last = entry.get("last_terminated")
    if previous:
        if not last or not last.get("container_id") or not last.get("log_path"):
            raise HTTPError(400, f'previous terminated container "{name}" in pod "{pod.name}" not found')
        return last
    if entry.get("container_id") and entry.get("log_path") and entry.get("state") in ("running", "exited", "unknown"):
        return entry
    if last and last.get("container_id") and last.get("log_path"):
        return last
    reason = entry.get("waiting_reason") or "ContainerCreating"
    detail = {"ErrImagePull": "image can't be pulled",
              "ImagePullBackOff": "trying and failing to pull image"}.get(reason, reason)
    raise HTTPError(400, f'container "{name}" in pod "{pod.name}" is waiting to start: {detail}')
