"""runtimeRequestTimeout: a CRI call the runtime does not answer fails after that long, with the
runtime's call named (shared/runtime/cri/client.py), against a real gRPC server on a unix socket."""

from __future__ import annotations

import asyncio
import time

import grpc
from cri_api.v1 import api_pb2 as cri
from cri_api.v1 import api_pb2_grpc as cri_grpc

from shared.config.settings import load_kubelet_config
from shared.runtime.cri import CRIClient, CRIError


class StuckRuntime(cri_grpc.RuntimeServiceServicer):
    async def ListPodSandbox(self, request, context):
        await asyncio.sleep(30)
        return cri.ListPodSandboxResponse()


async def test_a_call_the_runtime_does_not_answer_fails_after_runtime_request_timeout(tmp_path):
    k, _ = load_kubelet_config({"runtimeRequestTimeout": "1s"})
    server = grpc.aio.server()
    cri_grpc.add_RuntimeServiceServicer_to_server(StuckRuntime(), server)
    socket = tmp_path / "cri.sock"
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    client = CRIClient(f"unix://{socket}", timeout=k.runtime_request_timeout)
    try:
        start = time.monotonic()
        try:
            await client.list_pod_sandbox()
            raise AssertionError("the stuck call returned")
        except CRIError as exc:
            took = time.monotonic() - start
            assert exc.code == grpc.StatusCode.DEADLINE_EXCEEDED and exc.operation == "list_podsandbox"
        assert 0.9 <= took < 10, f"gave up after {took:.1f}s, not runtimeRequestTimeout's 1s"
    finally:
        await client.close()
        await server.stop(None)
