"""CRI v1 client over a unix socket: every call has a deadline and is measured."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Protocol, TypeVar

import grpc
from cri_api.v1 import api_pb2 as cri
from cri_api.v1 import api_pb2_grpc as cri_grpc

from shared.model.json_types import JSONObject
from shared.runtime.cri.metrics import RUNTIME_OPERATION_DURATION, RUNTIME_OPERATION_ERRORS, RUNTIME_OPERATIONS
from shared.tracing import spans as tracing

# Image pulls have no CRI deadline in the kubelet; bound them anyway so nothing waits forever.
PULL_TIMEOUT = 30 * 60.0
# StopContainer waits the grace period inside the runtime; give the RPC that plus this margin.
STOP_MARGIN = 30.0
# Stats back user-facing reads (stats/summary, metrics-server scrapes): fail fast, not in 2 min.
STATS_TIMEOUT = 10.0
# Exec/Attach/PortForward only hand out a URL; the stream itself has no RPC deadline.
STREAM_URL_TIMEOUT = 10.0
# A channel no call has used for this long is closed (CRIClient).
IDLE_CLOSE = 30.0

if TYPE_CHECKING:
    from shared.config.settings import KubeletConfiguration

log = logging.getLogger(__name__)

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


# The generated stubs (cri_api.v1.api_pb2_grpc) are not annotated: these are the RPCs this client
# makes, typed by their request and response messages.
class _RuntimeStub(Protocol):
    """The RuntimeService RPCs of cri_api.v1.api_pb2_grpc.RuntimeServiceStub used here."""

    Version: grpc.aio.UnaryUnaryMultiCallable[cri.VersionRequest, cri.VersionResponse]
    Status: grpc.aio.UnaryUnaryMultiCallable[cri.StatusRequest, cri.StatusResponse]
    RuntimeConfig: grpc.aio.UnaryUnaryMultiCallable[cri.RuntimeConfigRequest, cri.RuntimeConfigResponse]
    RunPodSandbox: grpc.aio.UnaryUnaryMultiCallable[cri.RunPodSandboxRequest, cri.RunPodSandboxResponse]
    StopPodSandbox: grpc.aio.UnaryUnaryMultiCallable[cri.StopPodSandboxRequest, cri.StopPodSandboxResponse]
    RemovePodSandbox: grpc.aio.UnaryUnaryMultiCallable[cri.RemovePodSandboxRequest, cri.RemovePodSandboxResponse]
    PodSandboxStatus: grpc.aio.UnaryUnaryMultiCallable[cri.PodSandboxStatusRequest, cri.PodSandboxStatusResponse]
    ListPodSandbox: grpc.aio.UnaryUnaryMultiCallable[cri.ListPodSandboxRequest, cri.ListPodSandboxResponse]
    CreateContainer: grpc.aio.UnaryUnaryMultiCallable[cri.CreateContainerRequest, cri.CreateContainerResponse]
    StartContainer: grpc.aio.UnaryUnaryMultiCallable[cri.StartContainerRequest, cri.StartContainerResponse]
    StopContainer: grpc.aio.UnaryUnaryMultiCallable[cri.StopContainerRequest, cri.StopContainerResponse]
    RemoveContainer: grpc.aio.UnaryUnaryMultiCallable[cri.RemoveContainerRequest, cri.RemoveContainerResponse]
    ListContainers: grpc.aio.UnaryUnaryMultiCallable[cri.ListContainersRequest, cri.ListContainersResponse]
    ContainerStatus: grpc.aio.UnaryUnaryMultiCallable[cri.ContainerStatusRequest, cri.ContainerStatusResponse]
    ExecSync: grpc.aio.UnaryUnaryMultiCallable[cri.ExecSyncRequest, cri.ExecSyncResponse]
    ReopenContainerLog: grpc.aio.UnaryUnaryMultiCallable[cri.ReopenContainerLogRequest, cri.ReopenContainerLogResponse]
    UpdateContainerResources: grpc.aio.UnaryUnaryMultiCallable[cri.UpdateContainerResourcesRequest,
                                                               cri.UpdateContainerResourcesResponse]
    ListContainerStats: grpc.aio.UnaryUnaryMultiCallable[cri.ListContainerStatsRequest, cri.ListContainerStatsResponse]
    ListPodSandboxStats: grpc.aio.UnaryUnaryMultiCallable[cri.ListPodSandboxStatsRequest, cri.ListPodSandboxStatsResponse]
    Exec: grpc.aio.UnaryUnaryMultiCallable[cri.ExecRequest, cri.ExecResponse]
    Attach: grpc.aio.UnaryUnaryMultiCallable[cri.AttachRequest, cri.AttachResponse]
    PortForward: grpc.aio.UnaryUnaryMultiCallable[cri.PortForwardRequest, cri.PortForwardResponse]


class _ImageStub(Protocol):
    """The ImageService RPCs of cri_api.v1.api_pb2_grpc.ImageServiceStub used here."""

    ImageStatus: grpc.aio.UnaryUnaryMultiCallable[cri.ImageStatusRequest, cri.ImageStatusResponse]
    PullImage: grpc.aio.UnaryUnaryMultiCallable[cri.PullImageRequest, cri.PullImageResponse]
    ListImages: grpc.aio.UnaryUnaryMultiCallable[cri.ListImagesRequest, cri.ListImagesResponse]
    RemoveImage: grpc.aio.UnaryUnaryMultiCallable[cri.RemoveImageRequest, cri.RemoveImageResponse]
    ImageFsInfo: grpc.aio.UnaryUnaryMultiCallable[cri.ImageFsInfoRequest, cri.ImageFsInfoResponse]


class CRIError(RuntimeError):
    """A failed CRI call: which operation, the gRPC code and the runtime's own message."""

    def __init__(self, operation: str, code: grpc.StatusCode | None, details: str) -> None:
        self.operation = operation
        self.code = code
        self.details = details
        code_name = code.name if code else "UNKNOWN"
        super().__init__(f"{operation}: {code_name}: {details}")

    @property
    def not_found(self) -> bool:
        return self.code == grpc.StatusCode.NOT_FOUND


# The calls that go to the ImageService (imageServiceEndpoint when set).
IMAGE_OPERATIONS = frozenset({"image_status", "pull_image", "list_images", "remove_image", "image_fs_info"})


def _unix_target(endpoint: str) -> str:
    return endpoint if endpoint.startswith("unix:") else f"unix://{endpoint}"


class CRIClient:
    """RuntimeService and ImageService of a CRI runtime: one endpoint, or the images at an endpoint
    of their own (imageServiceEndpoint).

    The gRPC channels are opened by the first call and closed once no call has been made for
    idle_close seconds; the next call opens them again. An open channel keeps gRPC's worker threads
    (four event-engine threads, a lifeguard and a timer: ~15 wake-ups a second) running in the
    process, and most services call the runtime only now and then (an exec probe, a pod's volumes
    torn down, a stats request), so they hold it only while they use it. A service calling every
    few seconds (pod-sync's relist) keeps it open. idle_close=None: never closed."""

    def __init__(self, endpoint: str, timeout: float = 120.0, idle_close: float | None = IDLE_CLOSE,
                 image_endpoint: str | None = None) -> None:
        self.endpoint = _unix_target(endpoint)
        # The kubelet's rule: no imageServiceEndpoint, the images are the runtime endpoint's.
        self.image_endpoint = _unix_target(image_endpoint) if image_endpoint else self.endpoint
        self.timeout = timeout
        self.idle_close = idle_close
        self._channels: list[grpc.aio.Channel] = []
        self._runtime_stub: _RuntimeStub | None = None
        self._image_stub: _ImageStub | None = None
        self._in_flight = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Task[None]] = set()

    @classmethod
    def for_node(cls, k: KubeletConfiguration, timeout: float | None = None) -> CRIClient:
        """The runtime as the node's configuration names it: containerRuntimeEndpoint, and
        imageServiceEndpoint for the images; each call's timeout runtimeRequestTimeout unless given."""
        return cls(k.container_runtime_endpoint, timeout=k.runtime_request_timeout if timeout is None else timeout,
                   image_endpoint=k.image_service_endpoint)

    @property
    def connected(self) -> bool:
        """Whether the channels are open now (they open with the next call)."""
        return bool(self._channels)

    def _open(self) -> None:
        if self._channels:
            return
        options = [("grpc.max_receive_message_length", 16 * 1024 * 1024)]
        interceptors = tracing.grpc_interceptors() or None  # a span per call where `tracing` is set
        runtime = grpc.aio.insecure_channel(self.endpoint, options=options, interceptors=interceptors)
        images = runtime if self.image_endpoint == self.endpoint else \
            grpc.aio.insecure_channel(self.image_endpoint, options=options, interceptors=interceptors)
        self._channels = [runtime] if images is runtime else [runtime, images]
        self._runtime_stub = cri_grpc.RuntimeServiceStub(runtime)
        self._image_stub = cri_grpc.ImageServiceStub(images)

    @property
    def _runtime(self) -> _RuntimeStub:
        self._open()
        assert self._runtime_stub is not None
        return self._runtime_stub

    @property
    def _images(self) -> _ImageStub:
        self._open()
        assert self._image_stub is not None
        return self._image_stub

    def _take_channels(self) -> list[grpc.aio.Channel]:
        channels, self._channels = self._channels, []
        self._runtime_stub = self._image_stub = None
        return channels

    def _close_if_idle(self) -> None:
        self._idle_timer = None
        if self._in_flight or not self._channels:
            return
        for channel in self._take_channels():
            task = asyncio.get_running_loop().create_task(self._close_channel(channel), name="cri:close-idle-channel")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _close_channel(self, channel: grpc.aio.Channel) -> None:
        try:
            await channel.close()
        except Exception as exc:  # the next call opens a new channel either way
            log.warning("closing an idle channel to %s failed: %s", self.endpoint, exc)

    async def close(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._closing:
            await asyncio.gather(*self._closing)
        for channel in self._take_channels():
            await channel.close()

    async def _call(self, op: str, method: grpc.aio.UnaryUnaryMultiCallable[_Request, _Response],
                    request: _Request, timeout: float | None = None) -> _Response:
        RUNTIME_OPERATIONS.labels(op).inc()
        start = time.monotonic()
        self._in_flight += 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        try:
            return await method(request, timeout=timeout or self.timeout)
        except grpc.aio.AioRpcError as exc:
            RUNTIME_OPERATION_ERRORS.labels(op).inc()
            details = exc.details() or ""
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                where, what = ((self.image_endpoint, "image service") if op in IMAGE_OPERATIONS
                               else (self.endpoint, "container runtime"))
                details += f" (is the {what} running at {where}?)"
            raise CRIError(op, exc.code(), details) from None
        finally:
            RUNTIME_OPERATION_DURATION.labels(op).observe(time.monotonic() - start)
            self._in_flight -= 1
            if not self._in_flight and self.idle_close is not None and self._channels:
                self._idle_timer = asyncio.get_running_loop().call_later(self.idle_close, self._close_if_idle)

    # RuntimeService

    async def version(self) -> cri.VersionResponse:
        return await self._call("version", self._runtime.Version, cri.VersionRequest(), timeout=10)

    async def status(self) -> cri.StatusResponse:
        return await self._call("status", self._runtime.Status, cri.StatusRequest(), timeout=10)

    async def run_pod_sandbox(self, config: cri.PodSandboxConfig) -> str:
        resp = await self._call("run_podsandbox", self._runtime.RunPodSandbox,
                                cri.RunPodSandboxRequest(config=config))
        return resp.pod_sandbox_id

    async def stop_pod_sandbox(self, sandbox_id: str) -> None:
        await self._call("stop_podsandbox", self._runtime.StopPodSandbox,
                         cri.StopPodSandboxRequest(pod_sandbox_id=sandbox_id))

    async def remove_pod_sandbox(self, sandbox_id: str) -> None:
        await self._call("remove_podsandbox", self._runtime.RemovePodSandbox,
                         cri.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id))

    async def pod_sandbox_status(self, sandbox_id: str) -> cri.PodSandboxStatus:
        resp = await self._call("podsandbox_status", self._runtime.PodSandboxStatus,
                                cri.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id))
        return resp.status

    async def list_pod_sandbox(self, labels: dict[str, str] | None = None) -> list[cri.PodSandbox]:
        flt = cri.PodSandboxFilter(label_selector=labels or {})
        resp = await self._call("list_podsandbox", self._runtime.ListPodSandbox,
                                cri.ListPodSandboxRequest(filter=flt))
        return list(resp.items)

    async def create_container(self, sandbox_id: str, config: cri.ContainerConfig,
                               sandbox_config: cri.PodSandboxConfig) -> str:
        resp = await self._call("create_container", self._runtime.CreateContainer,
                                cri.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config,
                                                           sandbox_config=sandbox_config))
        return resp.container_id

    async def start_container(self, container_id: str) -> None:
        await self._call("start_container", self._runtime.StartContainer,
                         cri.StartContainerRequest(container_id=container_id))

    async def stop_container(self, container_id: str, timeout: int) -> None:
        await self._call("stop_container", self._runtime.StopContainer,
                         cri.StopContainerRequest(container_id=container_id, timeout=timeout),
                         timeout=timeout + STOP_MARGIN)

    async def remove_container(self, container_id: str) -> None:
        await self._call("remove_container", self._runtime.RemoveContainer,
                         cri.RemoveContainerRequest(container_id=container_id))

    async def list_containers(self, labels: dict[str, str] | None = None,
                              sandbox_id: str | None = None) -> list[cri.Container]:
        flt = cri.ContainerFilter(label_selector=labels or {}, pod_sandbox_id=sandbox_id or "")
        resp = await self._call("list_containers", self._runtime.ListContainers,
                                cri.ListContainersRequest(filter=flt))
        return list(resp.containers)

    async def container_status(self, container_id: str) -> cri.ContainerStatus:
        resp = await self._call("container_status", self._runtime.ContainerStatus,
                                cri.ContainerStatusRequest(container_id=container_id))
        return resp.status

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> cri.ExecSyncResponse:
        """Run cmd in the container; the runtime enforces `timeout` (seconds), the RPC gets a margin."""
        return await self._call("exec_sync", self._runtime.ExecSync,
                                cri.ExecSyncRequest(container_id=container_id, cmd=cmd,
                                                    timeout=max(1, int(timeout))),
                                timeout=timeout + 10)

    async def reopen_container_log(self, container_id: str) -> None:
        await self._call("reopen_container_log", self._runtime.ReopenContainerLog,
                         cri.ReopenContainerLogRequest(container_id=container_id))

    async def update_container_resources(self, container_id: str, linux: cri.LinuxContainerResources) -> None:
        """In-place resize: the runtime rewrites the running container's cgroup."""
        await self._call("update_container_resources", self._runtime.UpdateContainerResources,
                         cri.UpdateContainerResourcesRequest(container_id=container_id, linux=linux))

    async def list_container_stats(self, sandbox_id: str | None = None) -> list[cri.ContainerStats]:
        flt = cri.ContainerStatsFilter(pod_sandbox_id=sandbox_id or "")
        resp = await self._call("list_container_stats", self._runtime.ListContainerStats,
                                cri.ListContainerStatsRequest(filter=flt), timeout=STATS_TIMEOUT)
        return list(resp.stats)

    async def list_pod_sandbox_stats(self) -> list[cri.PodSandboxStats]:
        resp = await self._call("list_podsandbox_stats", self._runtime.ListPodSandboxStats,
                                cri.ListPodSandboxStatsRequest(), timeout=STATS_TIMEOUT)
        return list(resp.stats)

    # Streaming: the runtime answers with a one-time URL on its streaming server.

    async def exec(self, request: cri.ExecRequest) -> str:
        resp = await self._call("exec", self._runtime.Exec, request, timeout=STREAM_URL_TIMEOUT)
        return resp.url

    async def attach(self, request: cri.AttachRequest) -> str:
        resp = await self._call("attach", self._runtime.Attach, request, timeout=STREAM_URL_TIMEOUT)
        return resp.url

    async def port_forward(self, sandbox_id: str, ports: list[int]) -> str:
        resp = await self._call("port_forward", self._runtime.PortForward,
                                cri.PortForwardRequest(pod_sandbox_id=sandbox_id, port=ports),
                                timeout=STREAM_URL_TIMEOUT)
        return resp.url

    # ImageService

    async def image_status(self, image: str) -> cri.Image | None:
        resp = await self._call("image_status", self._images.ImageStatus,
                                cri.ImageStatusRequest(image=cri.ImageSpec(image=image)))
        return resp.image if resp.HasField("image") else None

    async def pull_image(self, image: str, sandbox_config: cri.PodSandboxConfig | None = None,
                         auth: cri.AuthConfig | None = None) -> str:
        req = cri.PullImageRequest(image=cri.ImageSpec(image=image))
        if sandbox_config is not None:
            req.sandbox_config.CopyFrom(sandbox_config)
        if auth is not None:
            req.auth.CopyFrom(auth)
        resp = await self._call("pull_image", self._images.PullImage, req, timeout=PULL_TIMEOUT)
        return resp.image_ref

    async def list_images(self) -> list[cri.Image]:
        resp = await self._call("list_images", self._images.ListImages, cri.ListImagesRequest())
        return list(resp.images)

    async def remove_image(self, image: str) -> None:
        await self._call("remove_image", self._images.RemoveImage,
                         cri.RemoveImageRequest(image=cri.ImageSpec(image=image)))

    async def runtime_config(self) -> JSONObject:
        """The runtime's own config from verbose Status (containerd: its CRI plugin config, with
        sandboxImage); {} when the runtime does not share it."""
        resp = await self._call("status", self._runtime.Status, cri.StatusRequest(verbose=True), timeout=10)
        try:
            config = json.loads(resp.info.get("config", "{}"))
        except ValueError:
            return {}
        return config if isinstance(config, dict) else {}

    async def cgroup_driver(self) -> str | None:
        """The cgroup driver the runtime makes container cgroups with, "systemd" or "cgroupfs":
        from the RuntimeConfig call (containerd 2.x), else from the default runtime's options in
        its verbose status (containerd 1.x: SystemdCgroup); None when it says neither."""
        try:
            resp = await self._call("runtime_config", self._runtime.RuntimeConfig, cri.RuntimeConfigRequest(),
                                    timeout=10)
            return "systemd" if resp.linux.cgroup_driver == cri.SYSTEMD else "cgroupfs"
        except CRIError as exc:
            if exc.code != grpc.StatusCode.UNIMPLEMENTED:
                raise
        config = await self.runtime_config()
        containerd = config.get("containerd")
        if not isinstance(containerd, dict):
            return None
        runtimes = containerd.get("runtimes")
        default = containerd.get("defaultRuntimeName")
        runtime = runtimes.get(default) if isinstance(runtimes, dict) and isinstance(default, str) else None
        options = runtime.get("options") if isinstance(runtime, dict) else None
        if not isinstance(options, dict):
            return None
        systemd = options.get("SystemdCgroup")
        return None if not isinstance(systemd, bool) else "systemd" if systemd else "cgroupfs"

    async def image_fs_info(self) -> cri.ImageFsInfoResponse:
        return await self._call("image_fs_info", self._images.ImageFsInfo, cri.ImageFsInfoRequest(),
                                timeout=STATS_TIMEOUT)
