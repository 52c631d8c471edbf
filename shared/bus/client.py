"""The event bus: NATS subjects carrying small typed "look again" messages (shared/bus/messages.py).

Events only wake services up; the store holds the state. So a lost message costs latency, never
correctness: every service also resyncs from the store on a timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, TypeVar

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from prometheus_client import Gauge, Histogram
from pydantic import ValidationError

from shared.bus.messages import Event
from shared.tasks.retry import describe, until_done

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Publish -> handler start (both ends on one host, one clock), and the handler's own time.
BUS_DELIVERY_SECONDS = Histogram("pykubelet_bus_delivery_seconds",
                                 "Time from publishing an event to its handler starting", ["subject"],
                                 buckets=_LATENCY_BUCKETS)
# Every service subscribes once per event type at start: a number that grows while the node runs
# is a leak (the churn test and benchmark read it).
BUS_SUBSCRIPTIONS = Gauge("pykubelet_bus_subscriptions", "Subscriptions this process holds on the event bus")
BUS_HANDLER_SECONDS = Histogram("pykubelet_bus_handler_seconds", "Time an event handler took", ["subject"],
                                buckets=_LATENCY_BUCKETS)


SUBSCRIBE_FLUSH_TIMEOUT = 5


E = TypeVar("E", bound=Event)


class Bus:
    """A NATS connection that publishes and subscribes typed events."""

    def __init__(self, url: str, name: str, user: str = "", password: str = "") -> None:
        """user/password: this service's bus credentials (shared.bus.auth); empty: anonymous."""
        self.url = url
        self.name = name
        self._auth = {"user": user, "password": password} if user else {}
        self._nc: NATS | None = None
        self._auth_error: Exception | None = None
        self._subscriptions = 0

    async def connect(self, timeout: float = 30.0) -> None:
        """Connect, retrying until `timeout`; afterwards nats-py reconnects by itself forever."""
        self._auth_error = None
        deadline = time.monotonic() + timeout

        async def attempt() -> NATS:
            # The whole attempt is bounded: nats-py may retry internally on its own.
            return await asyncio.wait_for(nats.connect(
                self.url,
                name=self.name,
                connect_timeout=2,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                error_cb=self._on_error,
                disconnected_cb=self._on_disconnect,
                reconnected_cb=self._on_reconnect,
                **self._auth,
            ), timeout=max(0.1, min(5.0, deadline - time.monotonic())))

        try:
            # nats raises several unrelated types here: any failure is retried until the timeout.
            self._nc = await until_done(f"connecting to the event bus at {self.url}", attempt, log,
                                        initial=0.5, cap=2.0, timeout=timeout, level=logging.INFO)
        except Exception as exc:
            # nats-py reports a refused login to the error callback (then often a reset
            # connection); the attempt itself just times out.
            if self._auth_error is not None:
                raise ConnectionError(
                    f"the event bus at {self.url} refused {self.name}'s credentials ({self._auth_error}); "
                    "pass this service's file with --bus-credentials") from None
            raise ConnectionError(
                f"cannot reach the event bus at {self.url}: {describe(exc)}. Is nats-server running "
                "(pykubelet up starts one)?") from None

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    async def publish(self, event: Event) -> None:
        if self._nc is None:
            raise RuntimeError("bus not connected")
        try:
            stamped = event.model_copy(update={"sent_at": time.time()})
            await self._nc.publish(event.subject, stamped.model_dump_json().encode())
        except Exception as exc:
            # Losing a wake-up is tolerated by design: consumers resync on a timer.
            log.warning("event %s not published: %s", event.subject, exc)

    async def subscribe(self, event_type: type[E], handler: Callable[[E], Awaitable[None]]) -> None:
        if self._nc is None:
            raise RuntimeError("bus not connected")

        async def on_msg(msg: Msg) -> None:
            try:
                event = event_type.model_validate_json(msg.data)
            except ValidationError as exc:
                log.warning("dropping malformed %s message: %s", msg.subject, exc.errors()[:1])
                return
            started = time.time()
            if event.sent_at:
                BUS_DELIVERY_SECONDS.labels(msg.subject).observe(max(0.0, started - event.sent_at))
            try:
                await handler(event)
            except Exception:
                log.exception("handler for %s failed", msg.subject)
            finally:
                BUS_HANDLER_SECONDS.labels(msg.subject).observe(time.time() - started)

        await self._nc.subscribe(event_type.subject, cb=on_msg)
        self._subscriptions += 1
        BUS_SUBSCRIPTIONS.inc()
        # The server has the subscription once a flush returns: an event published right after
        # (by another service) is not missed. Bounded; a slow server only delays the start.
        try:
            await self._nc.flush(timeout=SUBSCRIBE_FLUSH_TIMEOUT)
        except Exception as exc:  # nats-py raises its own timeout types
            log.warning("subscription to %s not confirmed by the server yet: %s", event_type.subject, exc)

    async def close(self) -> None:
        BUS_SUBSCRIPTIONS.dec(self._subscriptions)  # a drained or closed connection holds none
        self._subscriptions = 0
        if self._nc is not None and not self._nc.is_closed:
            try:
                await asyncio.wait_for(self._nc.drain(), timeout=5)
            except Exception as exc:
                log.warning("bus drain did not finish: %s", exc)
                await self._nc.close()

    async def _on_error(self, exc: Exception) -> None:
        if "authorization" in str(exc).lower():
            self._auth_error = exc
        log.warning("event bus error: %s", exc)

    async def _on_disconnect(self) -> None:
        log.warning("event bus disconnected; reconnecting (state is safe in the store)")

    async def _on_reconnect(self) -> None:
        log.info("event bus reconnected")
