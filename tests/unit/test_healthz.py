"""The node's healthz (services/node_api/healthz.py) on a real listener and a real SQLite store:
"ok" only while every service's heartbeat is fresh, otherwise 500 naming each service that is not."""

from __future__ import annotations

import asyncio
import socket
from datetime import datetime, timedelta, timezone

import httpx

from services.node_api.healthz import serve_healthz, unhealthy
from shared.process.admin import SERVICES
from shared.store import ServiceState, Store


class Context:
    """What serve_healthz takes of a ServiceContext."""

    def __init__(self, store) -> None:
        self.store = store
        self.stopping = asyncio.Event()
        self.closers: list = []

    def on_shutdown(self, fn) -> None:
        self.closers.append(fn)


def beat(store, ages: dict[str, float], stopped: tuple[str, ...] = ()) -> None:
    """Each service's own row, written as that service (a row is its service's alone)."""
    now = datetime.now(timezone.utc)
    for name, age in ages.items():
        own = Store(store.path, writer=name)
        with own.session() as s:
            s.merge(ServiceState(name=name, pid=1, started_at=now - timedelta(seconds=age + 1),
                                 heartbeat_at=now - timedelta(seconds=age),
                                 stopped_at=now if name in stopped else None))
        own.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_healthz_says_ok_only_while_every_service_beats(store):
    beat(store, {name: 1 for name in SERVICES})
    ctx = Context(store)
    port = free_port()
    task = asyncio.create_task(serve_healthz(ctx, "127.0.0.1", port), name="healthz")  # type: ignore[arg-type]
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            for _ in range(50):
                try:
                    resp = await client.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.1)
            assert (resp.status_code, resp.text) == (200, "ok")
            beat(store, {"probe": 120, "eviction": 1}, stopped=("eviction",))
            resp = await client.get(f"http://127.0.0.1:{port}/healthz")
            assert resp.status_code == 500
            assert resp.text == ("[-]probe failed: no heartbeat for 120s\n[-]eviction failed: stopped\n"
                                 "healthz check failed\n")
    finally:
        ctx.stopping.set()
        await asyncio.wait_for(task, 10)
        for close in ctx.closers:
            await close()


async def test_a_port_held_by_another_process_is_tried_again_not_fatal(store, caplog):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    ctx = Context(store)
    task = asyncio.create_task(serve_healthz(ctx, "127.0.0.1", holder.getsockname()[1]),  # type: ignore[arg-type]
                               name="healthz")
    try:
        await asyncio.sleep(0.3)
        assert not task.done()
        assert "healthz: cannot listen on 127.0.0.1" in caplog.text and "trying again in 5s" in caplog.text
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        holder.close()


def test_a_service_never_started_is_named(store):
    beat(store, {name: 1 for name in SERVICES if name != "volume"})
    assert unhealthy(store) == ["volume: not started"]
