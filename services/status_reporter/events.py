"""Posting the kubelet's events to the API server: rate limited (eventRecordQPS / eventBurst),
identical events within ten minutes folded into one with a count, as the client-go recorder does,
and dropped rather than queued without bound when the API cannot keep up."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from shared.api.client import ApiError, KubeApi, path
from shared.bus.messages import KubeEvent
from shared.model.timestamps import rfc3339
from shared.tasks.token_bucket import TokenBucket

log = logging.getLogger(__name__)

QUEUE_LIMIT = 1000
AGGREGATE_WINDOW = 600.0


class EventPoster:
    def __init__(self, api: KubeApi, node_name: str, qps: float, burst: int) -> None:
        self.api = api
        self.node_name = node_name
        self.bucket = TokenBucket(qps, burst) if qps > 0 else None
        self.queue: asyncio.Queue[KubeEvent] = asyncio.Queue(QUEUE_LIMIT)
        self._seen: dict[tuple[Any, ...], tuple[str, str, int, float]] = {}  # key -> (ns, name, count, first)
        self.dropped = 0

    async def submit(self, event: KubeEvent) -> None:
        """An event from the bus. A service speaks of its pods or of this node only: a Node
        event is about this node whatever it names, any other kind is dropped."""
        if event.kind == "Node":
            event = event.model_copy(update={"namespace": "default", "name": self.node_name, "uid": self.node_name})
        elif event.kind != "Pod":
            log.warning("event %s about a %r dropped: only pods and this node have events", event.reason, event.kind)
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    def node_event(self, type_: str, reason: str, message: str) -> None:
        try:
            self.queue.put_nowait(KubeEvent(kind="Node", namespace="default", name=self.node_name,
                                            uid=self.node_name, type=type_, reason=reason, message=message))
        except asyncio.QueueFull:
            self.dropped += 1

    async def post(self, e: KubeEvent) -> None:
        if self.bucket is not None:
            await self.bucket.acquire()
        namespace = e.namespace or "default"
        key = (e.kind, namespace, e.name, e.uid, e.type, e.reason, e.message)
        seen = self._seen.get(key)
        stamp = rfc3339()
        if seen and time.monotonic() - seen[3] < AGGREGATE_WINDOW:
            ns, name, count, first = seen
            try:
                await self.api.patch(path("v1", "events", name, ns), {"count": count + 1, "lastTimestamp": stamp})
                self._seen[key] = (ns, name, count + 1, first)
                return
            except ApiError as exc:
                if exc.status != 404:
                    raise
        name = f"{e.name}.{uuid.uuid4().hex[:16]}"
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"kind": e.kind, "namespace": namespace if e.kind == "Pod" else "",
                                   "name": e.name, "uid": e.uid, "apiVersion": "v1"},
                "reason": e.reason, "message": e.message, "type": e.type, "count": 1,
                "firstTimestamp": stamp, "lastTimestamp": stamp,
                "source": {"component": "kubelet", "host": self.node_name},
                "reportingComponent": "kubelet", "reportingInstance": self.node_name}
        await self.api.create(path("v1", "events", namespace=namespace), body)
        self._seen[key] = (namespace, name, 1, time.monotonic())
        if len(self._seen) > 4096:  # forget the oldest half
            for k in sorted(self._seen, key=lambda k: self._seen[k][3])[:2048]:
                del self._seen[k]

    async def run(self) -> None:
        while True:
            event = await self.queue.get()
            try:
                await self.post(event)
            except Exception as exc:  # events are best effort
                log.debug("event %s %s not posted: %s", event.reason, event.name, exc)
