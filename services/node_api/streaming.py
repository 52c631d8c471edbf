"""exec, attach and port-forward: the runtime hands out a URL on its streaming server (CRI
Exec/Attach/PortForward) and the kubelet API proxies the client's upgraded connection (SPDY or
websocket) to it byte for byte, as the kubelet does. Nothing of a stream goes through the bus."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from services.node_api.http import Connection, HTTPError, Request

log = logging.getLogger(__name__)

BACKEND_TIMEOUT = 10.0     # connecting to the streaming server and reading its response head
MAX_RESPONSE_HEAD = 64 * 1024
CHUNK = 64 * 1024
# Request headers never passed on to the runtime: the client's credentials are ours to check.
DROPPED_HEADERS = {b"authorization", b"host", b"proxy-authorization", b"cookie", b"x-remote-user",
                   b"x-remote-group"}


@dataclass(frozen=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool
    command: list[str]


def _flag(req: Request, name: str) -> bool:
    return req.arg(name) in ("1", "true", "True")


def stream_options(req: Request, need_command: bool) -> StreamOptions:
    """The kubelet's query names (input/output/error/tty/command), as the API server sends them."""
    stdin, stdout, stderr, tty = (_flag(req, n) for n in ("input", "output", "error", "tty"))
    if tty and stderr:
        stderr = False  # a TTY merges stderr into stdout
    if not (stdin or stdout or stderr):
        raise HTTPError(400, "you must specify at least 1 of stdin, stdout, stderr")
    command = req.query.get("command", [])
    if need_command and not command:
        raise HTTPError(400, "command: at least one is required")
    if any("\x00" in c for c in command):
        raise HTTPError(400, "command: must not contain NUL bytes")
    return StreamOptions(stdin, stdout, stderr, tty, command)


def _request_head(req: Request, url: str) -> bytes:
    target = urlsplit(url)
    if target.scheme != "http" or not target.hostname:
        raise HTTPError(500, f"the runtime's streaming URL is not plain http: {url!r}")
    path = target.path + (f"?{target.query}" if target.query else "")
    lines = [f"{req.method} {path} HTTP/1.1".encode(), b"Host: " + target.netloc.encode()]
    for name, value in req.raw_headers:
        if name.lower() not in DROPPED_HEADERS:
            lines.append(name + b": " + value)
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def proxy_upgrade(req: Request, client: Connection, url: str, idle_timeout: float) -> None:
    """Forward the upgrade request to the streaming server, relay its answer, then copy bytes
    both ways until either side closes or nothing moves for idle_timeout."""
    target = urlsplit(url)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(target.hostname, target.port or 80), BACKEND_TIMEOUT)
    except (OSError, asyncio.TimeoutError) as exc:
        await _plain_error(client, 502, f"cannot reach the runtime's streaming server: {exc}")
        return
    try:
        writer.write(_request_head(req, url) + client.leftover)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BACKEND_TIMEOUT)
        if len(head) > MAX_RESPONSE_HEAD:
            raise HTTPError(502, "the streaming server's response head is too large")
        client.writer.write(head)
        await client.writer.drain()
        if not head.startswith((b"HTTP/1.1 101", b"HTTP/1.0 101")):
            # A refusal (e.g. unsupported protocol version): relay its body, then close.
            await _copy(reader, client.writer, [time.monotonic()])
            return
        await _splice(client, reader, writer, idle_timeout)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError) as exc:
        log.warning("stream %s: streaming server did not answer: %r", req.path, exc)
        await _plain_error(client, 502, "the runtime's streaming server did not answer")
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 2)


async def _splice(client: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  idle_timeout: float) -> None:
    last = [time.monotonic()]
    up = asyncio.create_task(_copy(client.reader, writer, last), name="node-api:stream-up")
    down = asyncio.create_task(_copy(reader, client.writer, last), name="node-api:stream-down")
    idle = asyncio.create_task(_idle_watch(last, idle_timeout), name="node-api:stream-idle")
    try:
        # Like the kubelet: when one direction ends, the whole stream ends.
        await asyncio.wait({up, down, idle}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (up, down, idle):
            t.cancel()
        await asyncio.gather(up, down, idle, return_exceptions=True)


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, last: list[float]) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while True:
            data = await src.read(CHUNK)
            if not data:
                return
            last[0] = time.monotonic()
            dst.write(data)
            await dst.drain()


async def _idle_watch(last: list[float], timeout: float) -> None:
    while True:
        left = last[0] + timeout - time.monotonic()
        if left <= 0:
            log.info("stream closed after %.0fs without traffic (streamingConnectionIdleTimeout)", timeout)
            return
        await asyncio.sleep(min(left, 60))


async def _plain_error(client: Connection, status: int, message: str) -> None:
    body = (message + "\n").encode()
    head = (f"HTTP/1.1 {status} Error\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with contextlib.suppress(Exception):
        client.writer.write(head + body)
        await client.writer.drain()
