"""The loopback admin app every service serves: health, readiness, metrics, state views."""

from __future__ import annotations

from typing import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

# A check returns (ok, message); readiness is the conjunction of all checks.
Check = Callable[[], tuple[bool, str]]
# Why what the views show may not be current (empty: it is).
Freshness = Callable[[], list[str]]
OWN_PATHS = {"/healthz", "/readyz", "/metrics"}

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


def create_admin_app(service: str, checks: dict[str, Check], freshness: Freshness | None = None) -> FastAPI:
    app = FastAPI(title=f"pykubelet {service} admin", docs_url=None, redoc_url=None)

    if freshness is not None:
        @app.middleware("http")
        async def say_if_not_current(request: Request,
                                     call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            """Every view says whether what it shows is current: Pykubelet-Current: yes, or no
            with the reasons in Pykubelet-Not-Current (as `pykubelet status` words them)."""
            response = await call_next(request)
            if request.url.path not in OWN_PATHS:
                reasons = freshness()
                response.headers["Pykubelet-Current"] = "no" if reasons else "yes"
                if reasons:
                    response.headers["Pykubelet-Not-Current"] = "; ".join(reasons)
            return response

    # async: answered on the event loop. A plain def would run in a worker thread: a thread (and
    # its malloc arena) in every service only to say "ok" to the supervisor's polls.
    @app.get("/healthz")
    async def healthz() -> Response:
        # Liveness: the event loop answers. Dependencies belong to /readyz.
        return Response("ok", media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        results = {name: check() for name, check in checks.items()}
        ready = all(ok for ok, _ in results.values())
        body = {"service": service, "ready": ready,
                "checks": {n: {"ok": ok, "message": msg} for n, (ok, msg) in results.items()}}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
