"""The four probe mechanisms (pkg/probe in the kubelet): HTTP GET, TCP connect, exec, gRPC health.

TCP and HTTP sockets are closed with SO_LINGER 0: the connection ends with a reset instead of
lingering in TIME-WAIT, so thousands of probes a minute cannot exhaust the node's ephemeral
ports (kubernetes#89898).
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
from dataclasses import dataclass
from urllib.parse import urlsplit

import grpc
import h11
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.cri import CRIError, RuntimeService
from shared.version import PROBE_USER_AGENT

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


def _no_linger(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass


async def _close(writer: asyncio.StreamWriter) -> None:
    _no_linger(writer)
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ssl.SSLError):
        pass


def _describe(exc: Exception) -> str:
    errno = getattr(exc, "errno", None)
    return os.strerror(errno).lower() if errno else str(exc)


async def tcp_probe(host: str, port: int, timeout: float) -> Outcome:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except asyncio.TimeoutError:
        return Outcome(FAILURE, f"dial tcp {host}:{port}: i/o timeout")
    except OSError as exc:
        return Outcome(FAILURE, f"dial tcp {host}:{port}: {_describe(exc)}")
    await _close(writer)
    return Outcome(SUCCESS)


class BadRequest(ValueError):
    """A probe whose path or headers cannot make an HTTP request (CR/LF, bad names)."""


def _request(host: str, port: int, target: str, headers: dict[str, str]) -> tuple[h11.Connection, bytes]:
    """The client connection state and the GET request's bytes; h11 refuses what would not be one
    well-formed request (a header value with CR/LF, a name that is not a token, a target with
    spaces) instead of sending it."""
    merged = {"host": f"{host}:{port}", "user-agent": USER_AGENT, "accept": "*/*", "connection": "close"}
    names = {"host": "Host", "user-agent": "User-Agent", "accept": "Accept", "connection": "Connection"}
    for k, v in headers.items():  # the probe's own headers win, whatever their case
        merged[k.lower()] = v
        names[k.lower()] = k
    conn = h11.Connection(h11.CLIENT)
    try:
        data = conn.send(h11.Request(method="GET", target=target,
                                     headers=[(names[k], v) for k, v in merged.items()]))
        data += conn.send(h11.EndOfMessage())
    except h11.LocalProtocolError as exc:
        raise BadRequest(f"invalid probe request: {exc}") from None
    return conn, data


async def _http_get_once(scheme: str, host: str, port: int, target: str, headers: dict[str, str],
                         timeout: float) -> tuple[int, dict[str, str], bytes]:
    conn, request = _request(host, port, target, headers)
    ctx = None
    if scheme == "https":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # probes do not verify certificates, as in the kubelet
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
    try:
        writer.write(request)
        await writer.drain()
        # h11 parses the response: status, headers, and a chunked or sized body alike.
        status, resp_headers, body = 0, {}, b""
        while len(body) < MAX_BODY:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise ValueError(f"malformed HTTP response: {exc}") from None
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                resp_headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        if not status:
            raise ValueError("the server closed the connection without a response")
        return status, resp_headers, body[:MAX_BODY]
    finally:
        await _close(writer)


async def http_probe(scheme: str, host: str, port: int, path: str, headers: dict[str, str],
                     timeout: float) -> Outcome:
    target = path if path.startswith("/") else f"/{path}"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    url = f"{scheme}://{host}:{port}{target}"
    for _ in range(MAX_REDIRECTS + 1):
        try:
            status, resp_headers, body = await asyncio.wait_for(
                _http_get_once(scheme, host, port, target, headers, timeout),
                max(0.01, deadline - loop.time()))
        except asyncio.TimeoutError:
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
