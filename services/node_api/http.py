"""A small HTTP/1.1 server (h11 over asyncio streams, TLS or plain) for the kubelet API.

Not an ASGI server because the kubelet API needs two things ASGI servers do not give: the
verified client certificate of the connection, and the raw connection after an `Upgrade`
request (exec, attach and port-forward are SPDY or websocket streams proxied byte for byte to
the runtime's streaming server). Everything else is plain request/response, with streamed
bodies for `logs -f`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import resource
import socket
import ssl
from asyncio import sslproto
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, cast
from urllib.parse import parse_qs, urlsplit

import h11

from services.node_api.conn_limits import ConnectionLimits, Slot

log = logging.getLogger(__name__)
# h11 has it at the top level without exporting it (not in its __all__).
MIGHT_SWITCH_PROTOCOL = h11.MIGHT_SWITCH_PROTOCOL  # type: ignore[attr-defined]

# Deadlines are totals, not per read: a client trickling a byte at a time gets no longer.
HANDSHAKE_TIMEOUT = 10.0      # the whole TLS handshake
HEADER_TIMEOUT = 10.0         # a whole request head (the first: from the end of the handshake)
BODY_TIMEOUT = 30.0           # a whole request body, on the routes that take one
KEEPALIVE_TIMEOUT = 120.0     # an idle keep-alive connection is closed after this
SHUTDOWN_TIMEOUT = 5.0        # for the TLS close_notify exchange when closing
# Connections, and the share of one client address (services/node_api/conn_limits.py says how
# a full server makes room). Each connection may need two descriptors (an exec, attach or
# port-forward stream also holds one to the runtime's streaming server); the limit is lowered to
# what RLIMIT_NOFILE allows after what the rest of the process needs.
MAX_CONNECTIONS = 1024
FDS_PER_CONNECTION = 2
RESERVED_FDS = 256
READ_CHUNK = 64 * 1024
# What one connection may buffer before reading pauses: a refused or slow client costs little.
# The StreamReader pauses at twice its limit; the TLS layer's is the ciphertext it holds.
READER_LIMIT = 16 * 1024
TLS_READ_BUFFER = 32 * 1024
# After refusing a request whose body was not read, the connection stays open this long with
# reading paused before it is closed: closing a socket with unread data resets it, and a reset
# that arrives before the client has read the answer loses the answer.
REFUSAL_LINGER = 0.5


def connection_limit(wanted: int = MAX_CONNECTIONS) -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(2, min(wanted, (soft - RESERVED_FDS) // FDS_PER_CONNECTION))


def _small_tls_buffers() -> None:
    """asyncio's TLS protocol allocates (and zeroes) a 256 KiB read buffer for every connection:
    256 MiB of resident memory for a full server. The size is a class attribute, so it is set
    for the process (node-api's other TLS connections only read in smaller steps)."""
    if getattr(sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER:
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]          # lower-case names; repeated headers joined with ", "
    raw_headers: list[tuple[bytes, bytes]]
    peercert: dict[str, Any] | None
    body: bytes = b""
    params: dict[str, str] = field(default_factory=dict)
    user: Any = None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def arg(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    @property
    def wants_upgrade(self) -> bool:
        return "upgrade" in self.headers.get("connection", "").lower() and bool(self.headers.get("upgrade"))


@dataclass
class Response:
    status: int = 200
    body: bytes | AsyncIterator[bytes] = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(obj).encode(), "application/json")


def text_response(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), "text/plain; charset=utf-8")


@dataclass
class Connection:
    """The raw connection an upgrade handler takes over, with bytes already read past the head."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    leftover: bytes


Handler = Callable[[Request], Awaitable[Response]]
UpgradeHandler = Callable[[Request, Connection], Awaitable[None]]


@dataclass
class Route:
    methods: frozenset[str]
    pattern: re.Pattern[str]
    handler: Handler
    upgrade: UpgradeHandler | None = None
    max_body: int = 0  # bytes; a larger body is refused before it is read


class Router:
    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, methods: str, path: str, handler: Handler, upgrade: UpgradeHandler | None = None,
            max_body: int = 0) -> None:
        """path like /exec/{namespace}/{pod}/{container}; a segment never matches '/', except a
        last one written {name:*}, which takes the rest of the path (slashes too, or nothing). A
        route takes no request body unless it says how large one may be."""
        rest = re.fullmatch(r"(.*)\{(\w+):\*\}", path)
        head, end = (rest[1], f"(?P<{rest[2]}>.*)$") if rest else (path.rstrip("/"), "/?$")
        regex = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", head) + end
        self.routes.append(Route(frozenset(methods.split()), re.compile(regex), handler, upgrade, max_body))

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = False
        for route in self.routes:
            m = route.pattern.match(path)
            if m is None:
                continue
            if method in route.methods or (method == "HEAD" and "GET" in route.methods):
                return route, m.groupdict()
            allowed = True
        if allowed:
            raise HTTPError(405, f"method {method} not allowed on {path}")
        raise HTTPError(404, "404 page not found")


# Runs before routing: authentication and authorization; raises HTTPError-like errors.
Gate = Callable[[Request], Awaitable[None]]


class HTTPServer:
    def __init__(self, router: Router, gate: Gate, ssl_context: ssl.SSLContext | None, name: str, *,
                 max_connections: int = MAX_CONNECTIONS, max_per_client: int | None = None) -> None:
        self.router = router
        self.gate = gate
        self.ssl = ssl_context
        self.name = name
        total = connection_limit(max_connections)
        if total < max_connections:
            log.warning("%s: at most %d connections (not %d): RLIMIT_NOFILE allows no more", name, total,
                        max_connections)
        self.limits = ConnectionLimits(total, min(max_per_client or total // 2, total - 1))
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        # TLS is started on each connection by its own task, not by the listener, so that a
        # connection counts against the limits from the moment it is accepted (a handshake that
        # never finishes holds a descriptor as surely as a request head that never does).
        if self.ssl is not None:
            _small_tls_buffers()
        # The accept queue as long as the kernel allows (net.core.somaxconn caps it), as Go's
        # listeners have it: in a flood a client waiting there is accepted, not reset.
        self._server = await asyncio.start_server(self._on_connection, host, port, limit=READER_LIMIT,
                                                  reuse_address=True, backlog=socket.SOMAXCONN)

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if peer else "unknown"

        def shed() -> None:
            writer.transport.abort()
            task.cancel()

        slot = self.limits.admit(client, shed)
        if slot is None:
            log.debug("%s: connection from %s refused: no room", self.name, client)
            writer.transport.abort()
            return
        self._connections.add(task)
        try:
            if self.ssl is not None:
                # ssl_shutdown_timeout is Python 3.12's (the stubs of the 3.11 target lack it).
                await writer.start_tls(self.ssl, ssl_handshake_timeout=HANDSHAKE_TIMEOUT,  # type: ignore[call-arg]
                                       ssl_shutdown_timeout=SHUTDOWN_TIMEOUT)
                # The TLS transport's own method (not in asyncio's Transport interface).
                writer.transport.set_read_buffer_limits(high=TLS_READ_BUFFER)  # type: ignore[attr-defined]
            await _Connection(self, reader, writer, slot).serve()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: connection handler failed", self.name)
        finally:
            slot.release()
            self._connections.discard(task)
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), 2)
            except (Exception, asyncio.CancelledError):
                writer.transport.abort()  # a peer that does not take the close_notify


def _declared_length(req: Request) -> int | None:
    """The body length the request announces; None when it is chunked (h11 has checked both
    headers and refuses requests that carry both)."""
    if "transfer-encoding" in req.headers:
        return None
    return int(req.headers.get("content-length") or 0)


def _parse_request(event: h11.Request, peercert: dict[str, Any] | None) -> Request:
    target = event.target.decode("latin-1")
    parts = urlsplit(target)
    headers: dict[str, str] = {}
    for name, value in event.headers:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    query = parse_qs(parts.query, keep_blank_values=True)
    return Request(event.method.decode("ascii"), parts.path or "/", query, headers, list(event.headers), peercert)


class _Connection:
    def __init__(self, server: HTTPServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 slot: Slot) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.slot = slot
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=32 * 1024)
        cert = writer.get_extra_info("peercert")
        self.peercert = cert or None

    async def _next_event(self, deadline: float) -> Any:
        """The next h11 event, reading as needed until deadline (loop time): TimeoutError after."""
        async with asyncio.timeout_at(deadline):
            while True:
                event = self.h11.next_event()
                if event is not h11.NEED_DATA:
                    return event
                self.h11.receive_data(await self.reader.read(READ_CHUNK))

    async def _request_head(self, first: bool) -> Any:
        loop = asyncio.get_running_loop()
        if not first:
            # Keep-alive: the next request may be long in coming, but once its first bytes are
            # here the whole head gets HEADER_TIMEOUT, like the first one.
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.h11.receive_data(await asyncio.wait_for(self.reader.read(READ_CHUNK), KEEPALIVE_TIMEOUT))
        return await self._next_event(loop.time() + HEADER_TIMEOUT)

    async def _send(self, *events: Any) -> None:
        for ev in events:
            data = self.h11.send(ev)
            if data:
                self.writer.write(data)
        await self.writer.drain()

    async def serve(self) -> None:
        first = True
        while True:
            try:
                event = await self._request_head(first)
            except h11.RemoteProtocolError as exc:
                await self._error_and_close(400, f"bad request: {exc}")
                return
            first = False
            if not isinstance(event, h11.Request):  # closed, or garbage h11 refused
                return
            req = _parse_request(event, self.peercert)
            if _declared_length(req) == 0:
                self.h11.next_event()  # its EndOfMessage: h11 needs no byte more for it
            try:
                reusable = await self._handle(req)
            finally:
                self.slot.busy = False
            if self.h11.their_state is h11.SEND_BODY:
                # Answered without reading the body (refused, or not a route that takes one).
                await self._linger()
                return
            if not reusable:
                return
            if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is h11.MUST_CLOSE:
                return
            try:
                self.h11.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _linger(self) -> None:
        cast(asyncio.Transport, self.writer.transport).pause_reading()
        await asyncio.sleep(REFUSAL_LINGER)

    async def _read_body(self, req: Request, limit: int) -> bytes:
        """The request body, refused (413) before it is read when it is declared larger than
        limit, and as soon as it grows past limit when it is not declared (chunked)."""
        if self.h11.their_state is not h11.SEND_BODY:
            return b""
        declared = _declared_length(req)
        if declared is not None and declared > limit:
            raise HTTPError(413, f"request body too large: {declared} bytes, this endpoint takes "
                                 f"{'none' if limit == 0 else f'at most {limit}'}")
        deadline = asyncio.get_running_loop().time() + BODY_TIMEOUT
        chunks, size = [], 0
        while True:
            try:
                event = await self._next_event(deadline)
            except TimeoutError:
                raise HTTPError(408, f"request body not received within {BODY_TIMEOUT:.0f}s") from None
            except h11.RemoteProtocolError as exc:
                raise HTTPError(400, f"bad request body: {exc}") from None
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise HTTPError(413, "request body too large")
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            elif event is h11.PAUSED:  # an Upgrade request: the rest is the new protocol's
                return b"".join(chunks)
            else:
                raise HTTPError(400, "incomplete request")

    async def _handle(self, req: Request) -> bool:
        """Serve one request; False when the connection must not be reused. Nothing of the body
        is read before the route is known and the client is authenticated."""
        try:
            route, req.params = self.server.router.match(req.method, req.path)
            await self.server.gate(req)
            self.slot.trusted = self.slot.busy = True
            req.body = await self._read_body(req, route.max_body)
            if route.upgrade is not None and req.wants_upgrade:
                leftover, _ = self.h11.trailing_data
                await route.upgrade(req, Connection(self.reader, self.writer, leftover))
                return False
            if self.h11.their_state is MIGHT_SWITCH_PROTOCOL:
                # An Upgrade this route does not take: answer plainly, then close.
                resp = await route.handler(req)
                await self._respond(req, resp)
                return False
            resp = await route.handler(req)
        except HTTPError as exc:
            resp = text_response(exc.message + "\n", exc.status)
        except Exception as exc:
            status = getattr(exc, "status", None)
            if isinstance(status, int) and 400 <= status < 600:
                resp = text_response(f"{exc}\n", status)
            else:
                log.exception("%s %s failed", req.method, req.path)
                resp = text_response(f"internal error: {exc}\n", 500)
        return await self._respond(req, resp)

    async def _respond(self, req: Request, resp: Response) -> bool:
        headers = [("content-type", resp.content_type), *resp.headers]
        body = resp.body
        if isinstance(body, (bytes, bytearray)):
            headers.append(("content-length", str(len(body))))
        if self.h11.their_state in (MIGHT_SWITCH_PROTOCOL, h11.SEND_BODY):
            headers.append(("connection", "close"))
        await self._send(h11.Response(status_code=resp.status, headers=headers))
        if req.method == "HEAD":
            close = getattr(body, "aclose", None)  # a stream not read is ended, its file closed
            if close is not None:
                await close()
            await self._send(h11.EndOfMessage())
            return True
        if isinstance(body, (bytes, bytearray)):
            await self._send(h11.Data(data=body), h11.EndOfMessage())
            return True
        return await self._stream(body)

    async def _stream(self, body: AsyncIterator[bytes]) -> bool:
        """Send a streamed body; stop at once if the client goes away (logs -f may be idle)."""
        gone = asyncio.create_task(self._client_gone(), name=f"{self.server.name}:watch-client")
        try:
            async for chunk in _until(body, gone):
                if chunk:
                    await self._send(h11.Data(data=chunk))
            if gone.done():
                return False
            await self._send(h11.EndOfMessage())
            return True
        finally:
            gone.cancel()
            with contextlib.suppress(BaseException):
                await gone
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

    async def _client_gone(self) -> None:
        # A client may pipeline its next request; anything it sends now is kept for h11.
        while True:
            data = await self.reader.read(READ_CHUNK)
            if not data:
                return
            self.h11.receive_data(data)

    async def _error_and_close(self, status: int, message: str) -> None:
        with contextlib.suppress(Exception):
            if self.h11.our_state is h11.IDLE or self.h11.our_state is h11.SEND_RESPONSE:
                body = (message + "\n").encode()
                await self._send(h11.Response(status_code=status, headers=[
                    ("content-type", "text/plain; charset=utf-8"), ("content-length", str(len(body))),
                    ("connection", "close")]), h11.Data(data=body), h11.EndOfMessage())


async def _until(body: AsyncIterator[bytes], stop: asyncio.Task[None]) -> AsyncIterator[bytes]:
    """Items of body until stop finishes (checked while waiting for each item)."""
    it = body.__aiter__()
    while not stop.done():
        nxt = asyncio.ensure_future(it.__anext__())
        done, _ = await asyncio.wait({nxt, stop}, return_when=asyncio.FIRST_COMPLETED)
        if nxt not in done:
            nxt.cancel()
            with contextlib.suppress(BaseException):
                await nxt
            return
        try:
            yield nxt.result()
        except StopAsyncIteration:
            return
