"""An OTLP/gRPC trace receiver for the tests: the collector's TraceService (opentelemetry-proto's
stubs) on a unix socket, keeping every span it is sent with its resource's attributes, so a test
asserts what a trace backend would show of a node's spans."""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int


@dataclass
class OtlpReceiver:
    socket: Path
    spans: list[ReceivedSpan] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: grpc.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        receiver = self

        class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 (the gRPC method's name)
                receiver._keep(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), self._server)
        self._server.add_insecure_port(self.endpoint)
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=2).wait(timeout=10)

    def _keep(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        got = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(ReceivedSpan(s.name, s.kind, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                                            {a.key: _value(a.value) for a in s.attributes}, resource,
                                            s.status.code))
        with self._lock:
            self.spans.extend(got)

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)
