"""The kubelet's healthz endpoint: http://healthzBindAddress:healthzPort/healthz (127.0.0.1:10248
by default), what `kubeadm join` and the kubelet's systemd drop-ins wait for.

Plain HTTP and no credentials, as the kubelet's, and nothing but /healthz: it tells only whether
the node is healthy. "ok" while every service of the node is alive (its heartbeat in the store is
fresh and it has not stopped); otherwise 500 naming each one that is not, in the kubelet's
"[-]NAME failed" form. A port another process holds is not fatal: the node runs on, the error is
logged and the bind tried again, as the kubelet does.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone

from services.node_api.http import HTTPServer, Request, Response, Router, text_response
from shared.process.admin import SERVICES
from shared.process.service import ServiceContext
from shared.store import Store
from shared.store.service_state import read_states

log = logging.getLogger(__name__)

RETRY_EVERY = 5.0
MAX_CONNECTIONS = 64  # health checkers, not clients: a few at a time


def unhealthy(store: Store, now: datetime | None = None) -> list[str]:
    """Why each service that is not healthy is not (empty: every one is)."""
    now = now or datetime.now(timezone.utc)
    states = read_states(store)
    out = []
    for name in SERVICES:
        view = states.get(name)
        if view is None or view.heartbeat_at is None:
            out.append(f"{name}: not started")
        elif view.stopped_at is not None:
            out.append(f"{name}: stopped")
        elif not view.alive(now):
            out.append(f"{name}: no heartbeat for {(now - view.heartbeat_at).total_seconds():.0f}s")
    return out


def healthz_router(store: Store) -> Router:
    async def healthz(req: Request) -> Response:
        problems = await asyncio.to_thread(unhealthy, store)
        if problems:
            return text_response("".join(f"[-]{p.replace(': ', ' failed: ', 1)}\n" for p in problems)
                                 + "healthz check failed\n", 500)
        return text_response("ok")
    r = Router()
    r.add("GET", "/healthz", healthz)
    return r


async def serve_healthz(ctx: ServiceContext, address: str, port: int) -> None:
    async def open_gate(req: Request) -> None:
        return None
    server = HTTPServer(healthz_router(ctx.store), open_gate, None, "healthz", max_connections=MAX_CONNECTIONS)
    ctx.on_shutdown(server.stop)
    while True:
        try:
            await server.start(address, port)
            break
        except OSError as exc:
            log.error("healthz: cannot listen on %s:%d: %s; trying again in %.0fs (healthzPort, healthzBindAddress)",
                      address, port, exc.strerror, RETRY_EVERY)
            await asyncio.sleep(RETRY_EVERY)
    log.info("healthz on http://%s:%d/healthz", address, server.port)
    await ctx.stopping.wait()
