"""The CRI client against a real gRPC server on a unix socket: its channel is opened by the first
call, closed once idle (gRPC's worker threads go with it) and opened again by the next call."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri
from cri_api.v1 import api_pb2_grpc as cri_grpc

from shared.runtime.cri import CRIClient, CRIError

REPO = Path(__file__).resolve().parents[2]


class Runtime(cri_grpc.RuntimeServiceServicer):
    def __init__(self) -> None:
        self.status_delay = 0.0

    async def Version(self, request, context):
        return cri.VersionResponse(runtime_name="test", runtime_version="1.0")

    async def Status(self, request, context):
        await asyncio.sleep(self.status_delay)
        return cri.StatusResponse(status=cri.RuntimeStatus(conditions=[]))


@pytest.fixture
async def runtime(tmp_path):
    servicer = Runtime()
    server = grpc.aio.server()
    cri_grpc.add_RuntimeServiceServicer_to_server(servicer, server)
    sock = tmp_path / "cri.sock"
    server.add_insecure_port(f"unix://{sock}")
    await server.start()
    yield servicer, str(sock)
    await server.stop(None)


async def test_the_channel_opens_on_use_and_closes_when_idle(runtime):
    _, sock = runtime
    client = CRIClient(sock, idle_close=0.3)
    assert not client.connected, "no channel before the first call"
    assert (await client.version()).runtime_name == "test"
    assert client.connected
    await asyncio.sleep(0.8)
    assert not client.connected, "closed after idle_close without a call"
    assert (await client.version()).runtime_version == "1.0", "the next call opens it again"
    assert client.connected
    await client.close()
    assert not client.connected


async def test_a_call_in_flight_keeps_the_channel_open(runtime):
    servicer, sock = runtime
    servicer.status_delay = 0.8
    client = CRIClient(sock, idle_close=0.2)
    await client.version()
    slow = asyncio.create_task(client.status())
    await asyncio.sleep(0.5)
    assert client.connected, "closed under a call in flight"
    await slow
    assert client.connected, "idle time counts from the last call's end"
    await asyncio.sleep(0.6)
    assert not client.connected
    await client.close()


async def test_without_idle_close_the_channel_stays(runtime):
    _, sock = runtime
    client = CRIClient(sock, idle_close=None)
    await client.version()
    await asyncio.sleep(0.5)
    assert client.connected
    await client.close()


class Images(cri_grpc.ImageServiceServicer):
    async def ListImages(self, request, context):
        return cri.ListImagesResponse(images=[cri.Image(id="sha256:from-the-image-service")])


async def test_an_image_service_endpoint_of_its_own_gets_the_image_calls(runtime, tmp_path):
    """imageServiceEndpoint: the ImageService's calls go there, the RuntimeService's to the
    runtime endpoint (which serves no images here: a call that went there would fail); both
    channels open and close together."""
    _, runtime_sock = runtime
    server = grpc.aio.server()
    cri_grpc.add_ImageServiceServicer_to_server(Images(), server)
    image_sock = tmp_path / "images.sock"
    server.add_insecure_port(f"unix://{image_sock}")
    await server.start()
    try:
        client = CRIClient(runtime_sock, idle_close=0.3, image_endpoint=f"unix://{image_sock}")
        assert [i.id for i in await client.list_images()] == ["sha256:from-the-image-service"]
        assert (await client.version()).runtime_name == "test"
        await asyncio.sleep(0.8)
        assert not client.connected
        assert [i.id for i in await client.list_images()] == ["sha256:from-the-image-service"]
        await client.close()
        # Without one, the image calls go to the runtime endpoint, as the kubelet's.
        alone = CRIClient(runtime_sock, image_endpoint="")
        with pytest.raises(CRIError, match="UNIMPLEMENTED"):
            await alone.list_images()
        await alone.close()
    finally:
        await server.stop(None)


async def test_an_image_service_that_is_not_there_is_named_in_the_error(runtime, tmp_path):
    _, runtime_sock = runtime
    client = CRIClient(runtime_sock, timeout=2, image_endpoint=f"unix://{tmp_path}/absent.sock")
    with pytest.raises(CRIError, match=f"is the image service running at unix://{tmp_path}/absent.sock"):
        await client.list_images()
    assert (await client.version()).runtime_name == "test", "the runtime's calls are not affected"
    await client.close()


IDLE_THREADS = """
import asyncio, os, sys
from shared.runtime.cri import CRIClient, CRIError

def grpc_workers():
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
    return sum(n in ("event_engine", "lifeguard") for n in names)

async def main():
    client = CRIClient(sys.argv[1], idle_close=0.2)
    try:
        await client.version()
    except CRIError:
        pass
    open_workers = grpc_workers()
    await asyncio.sleep(1.5)
    print(open_workers, grpc_workers(), client.connected)

asyncio.run(main())
"""


def test_closing_the_idle_channel_stops_grpcs_worker_threads(tmp_path):
    """What the idle close is for: an open channel keeps gRPC's event-engine threads running (a
    process of its own: a server in this one would keep them too)."""
    out = subprocess.run([sys.executable, "-c", IDLE_THREADS, str(tmp_path / "runtime.sock")], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    open_workers, idle_workers, connected = out.stdout.split()
    assert int(open_workers) > 0 and int(idle_workers) == 0 and connected == "False", out.stdout
