"""Probe mechanisms against real loopback servers."""

import asyncio
import socket

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.probe import probers


async def http_server(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def responder(status: int, body: bytes = b"", headers: str = ""):
    async def handle(reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # a TCP probe connects and resets without a request
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode() + body)
        await writer.drain()
        writer.close()
    return handle


@pytest.mark.parametrize("status,ok", [(200, True), (302, True), (399, True), (404, False), (500, False)])
async def test_http_status_ranges(status, ok):
    server, port = await http_server(responder(status, b"body"))
    out = await probers.http_probe("http", "127.0.0.1", port, "/healthz", {}, 2)
    assert out.ok is ok
    if not ok:
        assert out.output == f"HTTP probe failed with statuscode: {status}"
    server.close()


async def test_http_redirect_same_host_is_followed_other_host_is_a_warning():
    final, fport = await http_server(responder(500))
    same, sport = await http_server(responder(302, headers=f"Location: http://127.0.0.1:{fport}/x\r\n"))
    other, oport = await http_server(responder(301, headers="Location: http://example.invalid/\r\n"))
    assert (await probers.http_probe("http", "127.0.0.1", sport, "/", {}, 2)).result == probers.FAILURE
    out = await probers.http_probe("http", "127.0.0.1", oport, "/", {}, 2)
    assert out.result == probers.WARNING and out.ok
    for s in (final, same, other):
        s.close()


async def test_http_sends_headers_and_caps_the_body():
    seen = {}

    async def handle(reader, writer):
        seen["req"] = (await reader.readuntil(b"\r\n\r\n")).decode()
        body = b"x" * (50 * 1024)
        writer.write(b"HTTP/1.1 500 X\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    server, port = await http_server(handle)
    await probers.http_probe("http", "127.0.0.1", port, "/p", {"X-Probe": "yes"}, 2)
    assert "GET /p HTTP/1.1" in seen["req"] and "X-Probe: yes" in seen["req"]
    assert "User-Agent: kube-probe/" in seen["req"]
    server.close()


async def test_http_timeout():
    async def slow(reader, writer):
        await asyncio.sleep(5)

    server, port = await http_server(slow)
    out = await probers.http_probe("http", "127.0.0.1", port, "/", {}, 0.3)
    assert not out.ok and "context deadline exceeded" in out.output
    server.close()


async def test_tcp_probe_and_no_time_wait():
    server, port = await http_server(responder(200))
    assert (await probers.tcp_probe("127.0.0.1", port, 1)).ok
    for _ in range(20):
        await probers.tcp_probe("127.0.0.1", port, 1)
    server.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    out = await probers.tcp_probe("127.0.0.1", free, 1)
    assert not out.ok and "connection refused" in out.output.lower()
    # Our side closed with SO_LINGER 0: no TIME-WAIT entries towards that port.
    tw = [row for row in open("/proc/net/tcp").read().splitlines()[1:]
          if row.split()[3] == "06" and int(row.split()[2].split(":")[1], 16) == port]
    assert tw == []


async def test_tcp_and_http_probes_resolve_a_host_name_and_time_out():
    server, port = await http_server(responder(200, b"ok"))
    assert (await probers.tcp_probe("localhost", port, 1)).ok
    assert (await probers.http_probe("http", "localhost", port, "/", {}, 1)).output == "ok"
    out = await probers.tcp_probe("no-such-host.invalid", port, 1)
    assert not out.ok and out.output.startswith("dial tcp no-such-host.invalid:")
    server.close()

    async def silent(reader, writer):  # accepts, never answers
        await asyncio.sleep(5)
        writer.close()
    server, port = await http_server(silent)
    out = await probers.http_probe("http", "127.0.0.1", port, "/", {}, 0.3)
    assert not out.ok and "context deadline exceeded" in out.output
    server.close()


async def test_grpc_health():
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await _set(servicer, "", health_pb2.HealthCheckResponse.SERVING)
    await _set(servicer, "db", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert (await probers.grpc_probe("127.0.0.1", port, None, 2)).ok
    out = await probers.grpc_probe("127.0.0.1", port, "db", 2)
    assert not out.ok and "NOT_SERVING" in out.output
    await server.stop(0)


async def _set(servicer, service, status):
    result = servicer.set(service, status)
    if asyncio.iscoroutine(result):
        await result


@pytest.mark.parametrize("path, headers, why", [
    ("/", {"X-Probe": "yes\r\nX-Injected: 1"}, "invalid probe request"),
    ("/", {"Bad Name": "v"}, "invalid probe request"),
    ("/ok HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET /x", {}, "invalid probe request"),
])
async def test_http_probe_refuses_header_and_path_injection(path, headers, why):
    received = []

    async def handle(reader, writer):
        received.append(await reader.read(4096))
        writer.close()

    server, port = await http_server(handle)
    out = await probers.http_probe("http", "127.0.0.1", port, path, headers, 2)
    assert out.result == probers.FAILURE and why in out.output
    await asyncio.sleep(0.05)
    assert received == [], "nothing was sent"
    server.close()


async def test_http_probe_reads_a_chunked_body_and_lets_the_probe_set_host():
    seen = {}

    async def handle(reader, writer):
        seen["req"] = (await reader.readuntil(b"\r\n\r\n")).decode()
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        await writer.drain()
        writer.close()

    server, port = await http_server(handle)
    out = await probers.http_probe("http", "127.0.0.1", port, "/", {"host": "app.example"}, 2)
    assert out.ok and out.output == "hello world"
    assert seen["req"].count("ost: ") == 1 and "host: app.example" in seen["req"]
    server.close()


def test_probe_user_agent_matches_the_reported_kubelet_version():
    from shared.model.version import KUBELET_VERSION

    major_minor = ".".join(KUBELET_VERSION.lstrip("v").split(".")[:2])
    assert probers.USER_AGENT == f"kube-probe/{major_minor}"
