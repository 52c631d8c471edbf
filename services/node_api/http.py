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
import ssl
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import h11

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20            # the kubelet API takes no large bodies
HEADER_TIMEOUT = 30.0         # for a request head to arrive on an open connection
KEEPALIVE_TIMEOUT = 120.0     # an idle keep-alive connection is closed after this
HANDSHAKE_TIMEOUT = 10.0
MAX_CONNECTIONS = 1024
READ_CHUNK = 64 * 1024


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


class Upgraded:
    """What an upgrade handler returns after it has taken the connection over."""


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


class Router:
    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, methods: str, path: str, handler: Handler, upgrade: UpgradeHandler | None = None) -> None:
        """path like /exec/{namespace}/{pod}/{container}; a segment never matches '/'."""
        regex = "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path.rstrip("/")) + "/?$"
        self.routes.append(Route(frozenset(methods.split()), re.compile(regex), handler, upgrade))

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
    def __init__(self, router: Router, gate: Gate, ssl_context: ssl.SSLContext | None, name: str) -> None:
        self.router = router
        self.gate = gate
        self.ssl = ssl_context
        self.name = name
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> None:
        kwargs: dict[str, Any] = {}
        if self.ssl is not None:
            kwargs = {"ssl": self.ssl, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT}
        self._server = await asyncio.start_server(self._on_connection, host, port, limit=READ_CHUNK,
                                                  reuse_address=True, **kwargs)

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._connections) >= MAX_CONNECTIONS:
            writer.close()
            return
        if task is not None:
            self._connections.add(task)
        try:
            await _Connection(self, reader, writer).serve()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: connection handler failed", self.name)
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 2)


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
    def __init__(self, server: HTTPServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=32 * 1024)
        cert = writer.get_extra_info("peercert")
        self.peercert = cert or None

    async def _next_event(self, timeout: float) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await asyncio.wait_for(self.reader.read(READ_CHUNK), timeout)
            self.h11.receive_data(data)

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
                event = await self._next_event(HEADER_TIMEOUT if first else KEEPALIVE_TIMEOUT)
            except h11.RemoteProtocolError as exc:
                await self._error_and_close(400, f"bad request: {exc}")
                return
            first = False
            if not isinstance(event, h11.Request):  # closed, or garbage h11 refused
                return
            req = _parse_request(event, self.peercert)
            try:
                req.body = await self._read_body()
            except HTTPError as exc:
                await self._error_and_close(exc.status, exc.message)
                return
            if not await self._handle(req):
                return
            if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is h11.MUST_CLOSE:
                return
            try:
                self.h11.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _read_body(self) -> bytes:
        chunks, size = [], 0
        while True:
            event = await self._next_event(HEADER_TIMEOUT)
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY:
                    raise HTTPError(413, "request body too large")
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            elif event is h11.PAUSED:  # an Upgrade request: the rest is the new protocol's
                return b"".join(chunks)
            else:
                raise HTTPError(400, "incomplete request")

    async def _handle(self, req: Request) -> bool:
        """Serve one request; False when the connection must not be reused."""
        try:
            route, req.params = self.server.router.match(req.method, req.path)
            await self.server.gate(req)
            if route.upgrade is not None and req.wants_upgrade:
                leftover, _ = self.h11.trailing_data
                await route.upgrade(req, Connection(self.reader, self.writer, leftover))
                return False
            if self.h11.their_state is h11.MIGHT_SWITCH_PROTOCOL:
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
        streaming = not isinstance(resp.body, (bytes, bytearray))
        if not streaming:
            headers.append(("content-length", str(len(resp.body))))  # type: ignore[arg-type]
        if self.h11.their_state is h11.MIGHT_SWITCH_PROTOCOL:
            headers.append(("connection", "close"))
        await self._send(h11.Response(status_code=resp.status, headers=headers))
        if req.method == "HEAD":
            if streaming:
                await resp.body.aclose()  # type: ignore[union-attr]
            await self._send(h11.EndOfMessage())
            return True
        if not streaming:
            await self._send(h11.Data(data=resp.body), h11.EndOfMessage())
            return True
        return await self._stream(resp.body)  # type: ignore[arg-type]

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


async def _until(body: AsyncIterator[bytes], stop: asyncio.Task) -> AsyncIterator[bytes]:
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
