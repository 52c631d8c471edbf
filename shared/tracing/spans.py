"""The kubelet's tracing (KubeletConfiguration `tracing`): OpenTelemetry spans of pod syncs and of
every call to the container runtime, exported over OTLP/gRPC without TLS to `tracing.endpoint`
(the OTLP default, localhost:4317, when unset), as the kubelet 1.37 exports them:

- the resource names the service `kubelet` and the node (`host.name`), so a trace backend finds a
  pykubelet node where it finds a kubelet's; `pykubelet.service` says which service made a span;
- pod-sync's `syncPod` and `syncTerminatingPod` spans carry the kubelet's attributes (k8s.pod.uid,
  k8s.pod, k8s.pod.name, k8s.namespace.name, k8s.pod.update_type);
- each CRI call is a client span named as Go's otelgrpc names it
  (`runtime.v1.RuntimeService/RunPodSandbox`, with rpc.system, rpc.service, rpc.method and
  rpc.grpc.status_code), a child of the sync that made it, and carries the W3C trace context to
  the runtime;
- sampling: ParentBased(TraceIDRatioBased(samplingRatePerMillion / 10^6)), never without a
  sampled parent when the rate is 0 (unset).

Nothing of OpenTelemetry is imported, and no span made, unless `tracing` is set: a node without it
pays nothing. Each service makes its provider after it has started (after `pykubelet up`'s fork),
and flushes it when it stops."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from shared.config.settings import TracingConfig

log = logging.getLogger(__name__)

SERVICE_NAME = "kubelet"  # the kubelet's resource: semconv service.name = "kubelet"
KUBELET_TRACER = "k8s.io/kubernetes/pkg/kubelet"
GRPC_TRACER = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"

_provider: TracerProvider | None = None


def enabled() -> bool:
    return _provider is not None


def start(config: TracingConfig, node_name: str, service: str) -> None:
    """This process's tracer provider and exporter (once)."""
    global _provider
    if _provider is not None:
        return
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased

    root = TraceIdRatioBased(config.rate) if config.rate > 0 else ALWAYS_OFF
    resource = Resource.create({"service.name": SERVICE_NAME, "host.name": node_name, "pykubelet.service": service})
    provider = TracerProvider(sampler=ParentBased(root), resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.target, insecure=True)))
    trace.set_tracer_provider(provider)
    _provider = provider
    log.info("tracing: spans to %s over OTLP/gRPC, %d of a million new traces sampled", config.target,
             config.sampling_rate_per_million or 0)


def stop() -> None:
    """Export what is left (the exporter's own timeout bounds it) and stop."""
    global _provider
    if _provider is None:
        return
    provider, _provider = _provider, None
    try:
        provider.shutdown()
    except Exception as exc:  # a collector that went away must not hold the stop
        log.warning("tracing: the last spans were not exported: %s", exc)


@contextlib.contextmanager
def pod_sync_span(uid: str, update_type: str) -> Iterator[None]:
    """The kubelet's syncPod span around one pod's sync (syncTerminatingPod once the sync says,
    with pod_terminating(), that it stops the pod); pod_names() adds the pod's namespace and name
    once the sync has read them."""
    if _provider is None:
        yield
        return
    from opentelemetry import trace

    with trace.get_tracer(KUBELET_TRACER).start_as_current_span(
            "syncPod", attributes={"k8s.pod.uid": uid, "k8s.pod.update_type": update_type}):
        yield


def pod_terminating() -> None:
    """The current pod sync stops the pod: its span is the kubelet's syncTerminatingPod."""
    if _provider is None:
        return
    from opentelemetry import trace

    trace.get_current_span().update_name("syncTerminatingPod")


def pod_names(namespace: str, name: str) -> None:
    """The current pod sync's span (if any) gets the pod's names, as the kubelet's has them."""
    if _provider is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes({"k8s.pod": f"{namespace}/{name}", "k8s.pod.name": name,
                                             "k8s.namespace.name": namespace})


def grpc_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """What a gRPC client channel to the runtime takes: the client span of each call."""
    return [ClientSpans()] if _provider is not None else []


class ClientSpans(grpc.aio.UnaryUnaryClientInterceptor):
    """A client span per unary call, named and annotated as otelgrpc's, the W3C trace context in
    the call's metadata."""

    async def intercept_unary_unary(self, continuation: Callable[..., Awaitable[Any]],
                                    client_call_details: grpc.aio.ClientCallDetails, request: Any) -> Any:
        from opentelemetry import propagate, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        method = client_call_details.method
        full = (method.decode() if isinstance(method, bytes) else str(method)).lstrip("/")
        service, _, rpc = full.partition("/")
        tracer = trace.get_tracer(GRPC_TRACER)
        with tracer.start_as_current_span(full, kind=SpanKind.CLIENT, record_exception=False,
                                          attributes={"rpc.system": "grpc", "rpc.service": service,
                                                      "rpc.method": rpc}) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            metadata = grpc.aio.Metadata(*(client_call_details.metadata or ()), *carrier.items())
            details = grpc.aio.ClientCallDetails(client_call_details.method, client_call_details.timeout,
                                                 metadata, client_call_details.credentials,
                                                 client_call_details.wait_for_ready)
            call = await continuation(details, request)
            code = await call.code()
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code != grpc.StatusCode.OK:
                span.set_status(Status(StatusCode.ERROR, await call.details()))
            return call
