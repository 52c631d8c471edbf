"""The kubelet API server's limits, on loopback with real TLS: total deadlines for the handshake,
the request head and the body, bodies refused before they are read and before authentication
succeeds, and a full server making room by closing the connections that have proven nothing
(services/node_api/conn_limits.py), never one serving an authenticated request."""

from __future__ import annotations

import asyncio
import resource
import ssl

import pytest

from services.node_api import http
from services.node_api.conn_limits import ConnectionLimits
from services.node_api.http import HTTPServer, Request, Response, Router, connection_limit, text_response
from services.node_api.tls import server_context, serving_cert_paths
from shared.config.settings import KubeletConfiguration
from tests.cluster.pki import PKI


@pytest.fixture
def pki(tmp_path):
    return PKI(tmp_path / "pki")


@pytest.fixture
def client(pki):
    return pki.issue("client", "tester", ["system:masters"])


@pytest.fixture
def short_deadlines(monkeypatch):
    monkeypatch.setattr(http, "HANDSHAKE_TIMEOUT", 0.5)
    monkeypatch.setattr(http, "HEADER_TIMEOUT", 0.5)
    monkeypatch.setattr(http, "BODY_TIMEOUT", 0.5)
    monkeypatch.setattr(http, "REFUSAL_LINGER", 0.05)


class Server:
    """An HTTPS server whose gate lets in only the tests' client certificate; /hold waits until
    released, /echo takes a body of up to 10 bytes."""

    def __init__(self, tmp_path, pki, **limits) -> None:
        cfg = KubeletConfiguration.model_validate({"authentication": {"x509": {"clientCAFile": str(pki.ca.cert)}}})
        cert, key = serving_cert_paths(cfg, tmp_path / "certs", "node1", ["127.0.0.1"])
        self.release = asyncio.Event()
        self.holding = 0
        router = Router()
        router.add("GET", "/pods", self.pods)
        router.add("GET", "/hold", self.hold)
        router.add("POST", "/echo", self.echo, max_body=10)
        router.add("POST", "/run", self.pods)
        self.http = HTTPServer(router, self.gate, server_context(cfg, cert, key), "test", **limits)

    async def gate(self, req: Request) -> None:
        if not req.peercert:
            raise http.HTTPError(401, "Unauthorized")

    async def pods(self, req: Request) -> Response:
        return text_response("pods")

    async def hold(self, req: Request) -> Response:
        self.holding += 1
        await self.release.wait()
        return text_response("held")

    async def echo(self, req: Request) -> Response:
        return text_response(req.body.decode())


@pytest.fixture
async def make_server(tmp_path, pki):
    servers: list[Server] = []

    async def make(**limits) -> Server:
        s = Server(tmp_path, pki, **limits)
        await s.http.start("127.0.0.1", 0)
        servers.append(s)
        return s
    yield make
    for s in servers:
        s.release.set()
        await s.http.stop()


def _context(cert=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


async def connect(port: int, cert=None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=_context(cert)), 5)


async def answer(reader: asyncio.StreamReader, timeout: float = 5) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return int(head.split()[1]), await asyncio.wait_for(reader.readexactly(length), timeout)


async def closed(reader: asyncio.StreamReader, timeout: float = 5) -> bool:
    """True when the server closes the connection within timeout (sending nothing)."""
    try:
        data = await asyncio.wait_for(reader.read(100), timeout)
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return data == b""


async def request(port: int, head: str, cert=None, body: bytes = b"") -> tuple[int, bytes]:
    reader, writer = await connect(port, cert)
    try:
        writer.write(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        return await answer(reader)
    finally:
        writer.close()


GET_PODS = "GET /pods HTTP/1.1\nHost: n\n"


async def test_a_request_head_gets_a_total_deadline_not_one_per_read(make_server, short_deadlines):
    server = await make_server()
    reader, writer = await connect(server.http.port)
    writer.write(b"GET /pods HTTP/1.1\r\nX-Slow: ")
    start = asyncio.get_running_loop().time()
    for _ in range(20):  # a byte every 0.1 s: each read comes well within any per-read timeout
        if reader.at_eof():
            break
        writer.write(b"a")
        await asyncio.sleep(0.1)
    assert await closed(reader)
    assert asyncio.get_running_loop().time() - start < 1.9  # 0.5 s allowed, 2 s of trickling offered
    writer.close()


async def test_a_tls_handshake_gets_a_deadline(make_server, short_deadlines):
    server = await make_server()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.http.port)  # no TLS: sends nothing
    assert await closed(reader, timeout=3)
    writer.close()


async def test_a_body_is_refused_before_it_is_read(make_server, client):
    server = await make_server()
    announce = "POST /run HTTP/1.1\nHost: n\nContent-Length: 1048576\n"
    # Nothing of the announced megabyte is sent: the answers come from the head alone.
    status, body = await request(server.http.port, announce)
    assert status == 401  # no credentials: authentication first
    status, body = await request(server.http.port, announce, cert=client)
    assert status == 413 and b"this endpoint takes none" in body
    status, _ = await request(server.http.port, "POST /echo HTTP/1.1\nHost: n\nContent-Length: 11\n", cert=client)
    assert status == 413
    chunked = "POST /echo HTTP/1.1\nHost: n\nTransfer-Encoding: chunked\n"
    status, _ = await request(server.http.port, chunked, cert=client, body=b"b\r\n0123456789a\r\n")
    assert status == 413
    # within the route's limit, the body arrives
    assert await request(server.http.port, "POST /echo HTTP/1.1\nHost: n\nContent-Length: 5\n",
                         cert=client, body=b"hello") == (200, b"hello")
    assert await request(server.http.port, chunked, cert=client, body=b"3\r\nabc\r\n0\r\n\r\n") == (200, b"abc")


async def test_a_body_gets_a_total_deadline(make_server, client, short_deadlines):
    server = await make_server()
    status, body = await request(server.http.port, "POST /echo HTTP/1.1\nHost: n\nContent-Length: 10\n",
                                 cert=client, body=b"0123")
    assert status == 408 and b"not received within" in body


async def test_a_refusal_keeps_no_connection_open_for_the_unread_body(make_server):
    server = await make_server()
    reader, writer = await connect(server.http.port)
    writer.write(b"POST /run HTTP/1.1\r\nHost: n\r\nContent-Length: 1048576\r\n\r\n" + b"x" * 4096)
    assert (await answer(reader))[0] == 401
    assert await closed(reader)
    writer.close()
    # a refusal without a body keeps the connection for the next request
    reader, writer = await connect(server.http.port)
    for _ in range(2):
        writer.write(b"GET /pods HTTP/1.1\r\nHost: n\r\n\r\n")
        assert (await answer(reader))[0] == 401
    writer.close()


async def test_a_full_server_closes_the_oldest_unproven_connection_for_a_new_one(make_server, client):
    server = await make_server(max_connections=4, max_per_client=3)
    slow = []
    for _ in range(3):  # the client address's whole share, each in the middle of a head
        reader, writer = await connect(server.http.port)
        writer.write(b"GET /pods HTTP/1.1\r\n")
        slow.append((reader, writer))
    await asyncio.sleep(0.1)
    assert len(server.http.limits) == 3
    # An authenticated client from the same address is served, twice on one connection.
    reader, writer = await connect(server.http.port, client)
    for _ in range(2):
        writer.write(b"GET /pods HTTP/1.1\r\nHost: n\r\n\r\n")
        assert await answer(reader) == (200, b"pods")
    assert await closed(slow[0][0], timeout=2), "the oldest slow connection was not closed"
    assert not await closed(slow[1][0], timeout=0.2) and not await closed(slow[2][0], timeout=0.2)
    assert server.http.limits.shed_count == 1
    for _, w in [*slow, (reader, writer)]:
        w.close()


async def test_connections_serving_authenticated_requests_are_never_closed_for_room(make_server, client):
    server = await make_server(max_connections=4, max_per_client=2)
    busy = []
    for _ in range(2):
        reader, writer = await connect(server.http.port, client)
        writer.write(b"GET /hold HTTP/1.1\r\nHost: n\r\n\r\n")
        busy.append((reader, writer))
    while server.holding < 2:
        await asyncio.sleep(0.02)
    # No room for a third connection from this address: refused, nothing of the two disturbed.
    with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
        reader, writer = await connect(server.http.port, client)
        writer.write(b"GET /pods HTTP/1.1\r\nHost: n\r\n\r\n")
        await answer(reader, timeout=2)
    server.release.set()
    for reader, writer in busy:
        assert await answer(reader) == (200, b"held")
        writer.close()
    assert server.http.limits.refused_count == 1 and server.http.limits.shed_count == 0


def test_limits_rank_unproven_then_idle_then_never_busy():
    closed_ = []

    def slot(limits, client, name, trusted=False, busy=False):
        s = limits.admit(client, lambda: closed_.append(name))
        assert s is not None
        s.trusted, s.busy = trusted, busy
        return s

    limits = ConnectionLimits(total=4, per_client=2)
    slot(limits, "a", "a-busy", trusted=True, busy=True)
    slot(limits, "a", "a-idle", trusted=True)
    # a at its share: a new connection of a closes a's idle one (a has no unproven one) ...
    slot(limits, "a", "a-new")
    assert closed_ == ["a-idle"]
    # ... and b is not touched by a's connections
    slot(limits, "b", "b-unproven")
    slot(limits, "b", "b-idle", trusted=True)
    assert limits.held_by("a") == 2 and limits.held_by("b") == 2 and len(limits) == 4
    # full: the oldest unproven connection of anyone goes before any idle authenticated one
    slot(limits, "c", "c-1")
    assert closed_ == ["a-idle", "a-new"]
    c2 = slot(limits, "c", "c-2")
    assert closed_[-1] == "b-unproven"
    # unproven ones go first even when an idle authenticated one (b-idle) is older
    d1 = slot(limits, "d", "d-1")
    assert closed_[-1] == "c-1"
    # when all others serve requests, the oldest idle authenticated one makes room
    for s in (c2, d1):
        s.trusted = s.busy = True
    slot(limits, "e", "e-1")
    assert closed_ == ["a-idle", "a-new", "b-unproven", "c-1", "b-idle"]
    assert limits.shed_count == 5


def test_a_full_server_of_busy_connections_refuses():
    limits = ConnectionLimits(total=2, per_client=1)
    for client in ("a", "b"):
        s = limits.admit(client, lambda: pytest.fail("a busy connection was closed"))
        assert s is not None
        s.busy = s.trusted = True
    assert limits.admit("c", lambda: None) is None
    assert limits.refused_count == 1


def test_the_connection_limit_leaves_room_in_the_open_files_limit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    assert connection_limit(1024) == (1024 - http.RESERVED_FDS) // http.FDS_PER_CONNECTION
    monkeypatch.setattr(resource, "getrlimit", lambda _: (65536, 65536))
    assert connection_limit(1024) == 1024
    with pytest.raises(ValueError, match="per-client"):
        ConnectionLimits(total=4, per_client=4)
