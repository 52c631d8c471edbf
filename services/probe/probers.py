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
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.cri import CRIError, RuntimeService

MAX_BODY = 10 * 1024
MAX_REDIRECTS = 10
USER_AGENT = "kube-probe/1.30"
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


async def _http_get_once(scheme: str, host: str, port: int, target: str, headers: dict[str, str],
                         timeout: float) -> tuple[int, dict[str, str], bytes]:
    ctx = None
    if scheme == "https":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # probes do not verify certificates, as in the kubelet
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
    try:
        hdrs = {"Host": f"{host}:{port}", "User-Agent": USER_AGENT, "Accept": "*/*",
                "Connection": "close", **headers}
        request = f"GET {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        writer.write(request.encode("latin-1"))
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ValueError(f"malformed HTTP response {status_line[:80]!r}")
        resp_headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            key, _, value = line.decode("latin-1").partition(":")
            resp_headers[key.strip().lower()] = value.strip()
        body = await reader.read(MAX_BODY)
        return int(parts[1]), resp_headers, body
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
