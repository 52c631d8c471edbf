"""The loopback admin app every service serves: health, readiness, metrics, state views.

/healthz, /readyz and /metrics are answered by AdminApp itself, a plain ASGI app: they are
polled (the supervisor, systemd, compose health checks, a metrics scraper) and must cost a
service nothing it would not run anyway. The state views are FastAPI routers, and the FastAPI
app that serves them is built the first time a view (or any other path) is asked for. Building it
and running a request through it executes a good part of FastAPI, Starlette, anyio and pydantic;
in a service forked from `pykubelet up` every page of that code and data it touches becomes a
private copy (~3.7 MiB a service, measured), so a service nobody looks into never pays it.

Loopback is open to every local user and every hostNetwork pod, so every request, the health
checks included, must carry the node's admin token (shared/process/admin_token.py) as
`Authorization: Bearer`; without it the answer is a 401 that shows nothing. What the views
return is redacted before it is sent (shared/model/redact.py): a view shows pods, never their secrets.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Awaitable, Callable, MutableMapping

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI

# A check returns (ok, message); readiness is the conjunction of all checks.
Check = Callable[[], tuple[bool, str]]
# Why what the views show may not be current (empty: it is).
Freshness = Callable[[], list[str]]
# Builds a router of state views; called once, when the first view is asked for.
Views = Callable[[], "APIRouter"]
OWN_PATHS = {"/healthz", "/readyz", "/metrics"}
# Which values the views must never show, besides what redact() finds in their answers: the
# env values and header values of the node's pods (a message may quote one).
Secrets = Callable[[], "set[str]"]
# The secrets() of the request being answered, read off the event loop before the views run.
_KNOWN: ContextVar[frozenset[str]] = ContextVar("admin_known_secrets", default=frozenset())
UNAUTHORIZED = (b'{"detail":"Unauthorized: every admin URL needs the node\'s admin token as '
                b'Authorization: Bearer (the root dir\'s run/admin-token, readable by root)"}')

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The services in start order: network first so pods find the network ready, node-api last.
SERVICES = ["network", "pod-sync", "status-reporter", "probe", "volume", "eviction", "node-api"]

# Default loopback admin ports, one per service (overridable with --admin-port).
ADMIN_PORTS = {
    "pod-sync": 10260,
    "probe": 10261,
    "volume": 10262,
    "network": 10263,
    "eviction": 10264,
    "status-reporter": 10265,
    "node-api": 10266,
}


def admin_port(service: str, base: int = 0) -> int:
    """A service's loopback admin port: its default, or base + its place in SERVICES when a node
    runs with --admin-port-base (so every service can find every other one)."""
    return base + SERVICES.index(service) if base else ADMIN_PORTS[service]


class AdminApp:
    """One service's admin app (ASGI). Views are added as router factories before it serves."""

    def __init__(self, service: str, checks: dict[str, Check], *, token: str,
                 freshness: Freshness | None = None, secrets: Secrets | None = None) -> None:
        if not token:
            raise ValueError(f"{service}: an admin app needs the node's admin token")
        self.service = service
        self.checks = checks
        self.freshness = freshness
        self.secrets = secrets
        self._authorization = f"Bearer {token}".encode()
        self._views: list[Views] = []
        self._app: FastAPI | None = None
        self._build_lock = asyncio.Lock()

    def add_views(self, views: Views) -> None:
        if self._app is not None:
            raise RuntimeError(f"{self.service}: views must be added before the admin app serves them")
        self._views.append(views)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self._authorized(scope):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            else:
                await _respond(send, scope, 401, UNAUTHORIZED, "application/json",
                               [(b"www-authenticate", b'Bearer realm="pykubelet admin"')])
            return
        if scope["type"] == "http" and scope["path"] in OWN_PATHS:
            await self._own(scope, send)
        else:
            if self.secrets is not None:  # a store read: in a thread, not on the event loop
                _KNOWN.set(frozenset(await asyncio.to_thread(self.secrets)))
            await (await self._built_views_app())(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        """The request carries the token (compared in constant time); only one Authorization
        header counts, as two would be ambiguous."""
        given = [v for k, v in scope.get("headers", ()) if k.lower() == b"authorization"]
        return len(given) == 1 and hmac.compare_digest(given[0], self._authorization)

    async def _own(self, scope: Scope, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await _respond(send, scope, 405, b'{"detail":"Method Not Allowed"}', "application/json",
                           [(b"allow", b"GET, HEAD")])
            return
        path = scope["path"]
        if path == "/healthz":
            # Liveness: the event loop answers. Dependencies belong to /readyz.
            await _respond(send, scope, 200, b"ok", "text/plain; charset=utf-8")
        elif path == "/readyz":
            results = {name: check() for name, check in self.checks.items()}
            ready = all(ok for ok, _ in results.values())
            body = {"service": self.service, "ready": ready,
                    "checks": {n: {"ok": ok, "message": msg} for n, (ok, msg) in results.items()}}
            await _respond(send, scope, 200 if ready else 503,
                           json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), "application/json")
        else:
            await _respond(send, scope, 200, generate_latest(), CONTENT_TYPE_LATEST)

    def views_app(self) -> FastAPI:
        """The FastAPI app of the views (and FastAPI's 404 for any other path), built once."""
        if self._app is None:
            self._app = _build_views_app(self.service, self._views, self.freshness)
        return self._app

    async def _built_views_app(self) -> FastAPI:
        """views_app() for a request: the first one builds it in a thread, since importing
        FastAPI reads its modules from disk, which a busy disk can make take a second."""
        if self._app is None:
            async with self._build_lock:
                if self._app is None:
                    self._app = await asyncio.to_thread(_build_views_app, self.service, self._views, self.freshness)
        return self._app


async def _respond(send: Send, scope: Scope, status: int, body: bytes, content_type: str,
                   extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
               *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


def _build_views_app(service: str, views: list[Views], freshness: Freshness | None) -> FastAPI:
    from fastapi import FastAPI, Request, Response
    from fastapi.responses import JSONResponse

    from shared.model.redact import redact

    class RedactedJSON(JSONResponse):
        """Every view's answer, its secrets replaced: one place, so a new view is covered too.
        A view must return data, not a Response of its own, to pass through here."""

        def render(self, content: Any) -> bytes:
            return super().render(redact(content, _KNOWN.get()))

    app = FastAPI(title=f"pykubelet {service} admin", docs_url=None, redoc_url=None,
                  default_response_class=RedactedJSON)
    if freshness is not None:
        @app.middleware("http")
        async def say_if_not_current(request: Request,
                                     call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            """Every view says whether what it shows is current: Pykubelet-Current: yes, or no
            with the reasons in Pykubelet-Not-Current (as `pykubelet status` words them)."""
            response = await call_next(request)
            reasons = freshness()
            response.headers["Pykubelet-Current"] = "no" if reasons else "yes"
            if reasons:
                response.headers["Pykubelet-Not-Current"] = "; ".join(reasons)
            return response

    for make in views:
        app.include_router(make())
    return app
