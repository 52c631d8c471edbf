"""The four probe mechanisms (pkg/probe in the kubelet): HTTP GET, TCP connect, exec, gRPC health.

TCP and HTTP sockets are closed with SO_LINGER 0: the connection ends with a reset instead of
lingering in TIME-WAIT, so thousands of probes a minute cannot exhaust the node's ephemeral
ports (kubernetes#89898).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

import grpc
import h11
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.model.version import PROBE_USER_AGENT
from shared.runtime.cri import CRIError, RuntimeService

MAX_BODY = 10 * 1024
MAX_REDIRECTS = 10
USER_AGENT = PROBE_USER_AGENT
SUCCESS, FAILURE, WARNING = "success", "failure", "warning"


@dataclass
class Outcome:
    result: str  # success, failure, warning (a success worth mentioning)
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.result != FAILURE


def _no_linger(sock: socket.socket) -> None:
    """Closing sends a reset (SO_LINGER 0): no TIME-WAIT left behind."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


async def _close(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        _no_linger(sock)
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ssl.SSLError):
        pass


def _describe(exc: Exception) -> str:
    errno = getattr(exc, "errno", None)
    return os.strerror(errno).lower() if errno else str(exc)


async def _connect(host: str, port: int) -> socket.socket:
    """A connected non-blocking socket, straight on the event loop: no transport, protocol or
    stream objects for a connection that lives a few milliseconds (at hundreds of probes a
    second their setup was most of the probe service's CPU)."""
    loop = asyncio.get_running_loop()
    try:
        ip = ipaddress.ip_address(host)
        addrs: list[tuple[socket.AddressFamily, Any]] = [
            (socket.AF_INET6 if ip.version == 6 else socket.AF_INET, (host, port))]
    except ValueError:  # a name: resolved like any client would
        addrs = [(fam, addr) for fam, _, _, _, addr in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    error: OSError = OSError(f"no address for {host}")
    for family, addr in addrs:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, addr)
            return sock
        except OSError as exc:
            _abort(sock)
            error = exc
        except BaseException:  # the probe's timeout
            _abort(sock)
            raise
    raise error


def _abort(sock: socket.socket) -> None:
    _no_linger(sock)
    sock.close()


async def tcp_probe(host: str, port: int, timeout: float) -> Outcome:
    try:
        async with asyncio.timeout(timeout):
            sock = await _connect(host, port)
    except TimeoutError:
        return Outcome(FAILURE, f"dial tcp {host}:{port}: i/o timeout")
    except OSError as exc:
        return Outcome(FAILURE, f"dial tcp {host}:{port}: {_describe(exc)}")
    _abort(sock)
    return Outcome(SUCCESS)


class BadRequest(ValueError):
    """A probe whose path or headers cannot make an HTTP request (CR/LF, bad names)."""


@functools.lru_cache(maxsize=4096)
def _request_event(host: str, port: int, target: str, headers: tuple[tuple[str, str], ...]) -> h11.Request:
    """The GET request, validated once per distinct probe (a probe sends the same one every
    period): h11 refuses what would not be one well-formed request (a header value with CR/LF, a
    name that is not a token, a target with spaces) instead of sending it."""
    merged = {"host": f"{host}:{port}", "user-agent": USER_AGENT, "accept": "*/*", "connection": "close"}
    names = {"host": "Host", "user-agent": "User-Agent", "accept": "Accept", "connection": "Connection"}
    for k, v in headers:  # the probe's own headers win, whatever their case
        merged[k.lower()] = v
        names[k.lower()] = k
    try:
        return h11.Request(method="GET", target=target, headers=[(names[k], v) for k, v in merged.items()])
    except h11.LocalProtocolError as exc:
        raise BadRequest(f"invalid probe request: {exc}") from None


def _request(host: str, port: int, target: str, headers: dict[str, str]) -> tuple[h11.Connection, bytes]:
    """A fresh client connection state and the request's bytes."""
    event = _request_event(host, port, target, tuple(headers.items()))
    conn = h11.Connection(h11.CLIENT)
    try:
        data = (conn.send(event) or b"") + (conn.send(h11.EndOfMessage()) or b"")
    except h11.LocalProtocolError as exc:
        raise BadRequest(f"invalid probe request: {exc}") from None
    return conn, data


def _parse(conn: h11.Connection, data: bytes) -> tuple[int, dict[str, str], bytes, bool]:
    """Feed what arrived to h11, which parses the response (status, headers, a chunked or sized
    body alike): (status, headers, body so far, complete). An empty read is the end of the stream."""
    status, body = 0, b""
    headers: dict[str, str] = {}
    conn.receive_data(data)
    while len(body) < MAX_BODY:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise ValueError(f"malformed HTTP response: {exc}") from None
        if event is h11.NEED_DATA:
            return status, headers, body, False
        if isinstance(event, h11.Response):
            status = event.status_code
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            break
    return status, headers, body, True


async def _read_response(conn: h11.Connection, recv: Callable[[], Awaitable[bytes]]
                         ) -> tuple[int, dict[str, str], bytes]:
    status, headers, body = 0, {}, b""
    while True:
        data = await recv()
        got_status, got_headers, got_body, complete = _parse(conn, data)
        if got_status:
            status, headers = got_status, got_headers
        body += got_body
        if complete or not data or len(body) >= MAX_BODY:
            break
    if not status:
        raise ValueError("the server closed the connection without a response")
    return status, headers, body[:MAX_BODY]


async def _http_get_once(scheme: str, host: str, port: int, target: str, headers: dict[str, str]
                         ) -> tuple[int, dict[str, str], bytes]:
    conn, request = _request(host, port, target, headers)
    if scheme == "https":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # probes do not verify certificates, as in the kubelet
        reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
        try:
            writer.write(request)
            await writer.drain()
            return await _read_response(conn, lambda: reader.read(65536))
        finally:
            await _close(writer)
    loop = asyncio.get_running_loop()
    sock = await _connect(host, port)
    try:
        await loop.sock_sendall(sock, request)
        return await _read_response(conn, lambda: loop.sock_recv(sock, 65536))
    finally:
        _abort(sock)


async def http_probe(scheme: str, host: str, port: int, path: str, headers: dict[str, str],
                     timeout: float) -> Outcome:
    target = path if path.startswith("/") else f"/{path}"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    url = f"{scheme}://{host}:{port}{target}"
    for _ in range(MAX_REDIRECTS + 1):
        try:
            async with asyncio.timeout_at(deadline):
                status, resp_headers, body = await _http_get_once(scheme, host, port, target, headers)
        except TimeoutError:
            return Outcome(FAILURE, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded '
                                    "while awaiting headers)")
        except BadRequest as exc:
            return Outcome(FAILURE, f'Get "{url}": {exc}')
        except (OSError, ValueError, ssl.SSLError) as exc:
            return Outcome(FAILURE, f'Get "{url}": {_describe(exc)}')
        text = body.decode(errors="replace")
        if 300 <= status < 400 and "location" in resp_headers:
            loc = urlsplit(resp_headers["location"])
            new_host = loc.hostname or host
            if new_host != host:
                # The kubelet does not follow redirects to other hosts; it calls that a success.
                return Outcome(WARNING, f"Probe terminated redirects, Response body: {text}")
            scheme = loc.scheme or scheme
            port = loc.port or port
            target = (loc.path or "/") + (f"?{loc.query}" if loc.query else "")
            url = f"{scheme}://{host}:{port}{target}"
            continue
        if 200 <= status < 400:
            return Outcome(SUCCESS, text)
        return Outcome(FAILURE, f"HTTP probe failed with statuscode: {status}")
    return Outcome(FAILURE, f'Get "{url}": stopped after {MAX_REDIRECTS} redirects')


async def exec_probe(runtime: RuntimeService, container_id: str, command: list[str], timeout: float) -> Outcome:
    try:
        resp = await runtime.exec_sync(container_id, command, timeout)
    except CRIError as exc:
        if exc.code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return Outcome(FAILURE, f"command {command!r} timed out")
        return Outcome(FAILURE, f"exec failed: {exc.details}")
    output = (resp.stdout + resp.stderr)[:MAX_BODY].decode(errors="replace")
    if resp.exit_code == 0:
        return Outcome(SUCCESS, output)
    return Outcome(FAILURE, output or f"command {command!r} exited with {resp.exit_code}")


async def grpc_probe(host: str, port: int, service: str | None, timeout: float) -> Outcome:
    target = f"{host}:{port}"
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=service or ""), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Outcome(FAILURE, f"timeout: health rpc did not complete within {timeout:g}s")
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return Outcome(FAILURE, "error: this server does not implement the grpc health protocol "
                                        "(grpc.health.v1.Health)")
            return Outcome(FAILURE, f"error: health rpc failed: {exc.code().name}: {exc.details()}")
    if resp.status == health_pb2.HealthCheckResponse.SERVING:
        return Outcome(SUCCESS)
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    return Outcome(FAILURE, f"service unhealthy (responded with {name})")
