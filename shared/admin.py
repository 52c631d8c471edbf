"""The loopback admin app every service serves: health, readiness, metrics, state views."""

from __future__ import annotations

from typing import Callable

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

# A check returns (ok, message); readiness is the conjunction of all checks.
Check = Callable[[], tuple[bool, str]]

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


def create_admin_app(service: str, checks: dict[str, Check]) -> FastAPI:
    app = FastAPI(title=f"pykubelet {service} admin", docs_url=None, redoc_url=None)

    @app.get("/healthz")
    def healthz() -> Response:
        # Liveness: the event loop answers. Dependencies belong to /readyz.
        return Response("ok", media_type="text/plain")

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        results = {name: check() for name, check in checks.items()}
        ready = all(ok for ok, _ in results.values())
        body = {"service": service, "ready": ready,
                "checks": {n: {"ok": ok, "message": msg} for n, (ok, msg) in results.items()}}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
