"""In cluster mode the Node's spec.podCIDR (set by the controller-manager or an admin) decides
the pod network; the configured podCIDR is the fallback until the Node has one."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from shared.api.client import KubeApi, path

log = logging.getLogger(__name__)

WATCH_TIMEOUT = 300  # seconds; then list and watch again


class NodePodCIDRWatcher:
    """The Node's podCIDR, from a list + watch of this one Node (no polling)."""

    def __init__(self, api: KubeApi, node_name: str, apply: Callable[[str], None], retry_every: float = 5.0) -> None:
        self.api = api
        self.node_name = node_name
        self.apply = apply  # called with the Node's podCIDR ("" while it has none)
        self.retry_every = retry_every

    def _seen(self, node: dict[str, Any]) -> None:
        self.apply((node.get("spec") or {}).get("podCIDR") or "")

    async def run(self) -> None:
        selector = f"metadata.name={self.node_name}"
        while True:
            try:
                nodes, version = await self.api.list(path("v1", "nodes"), fieldSelector=selector)
                for node in nodes:
                    self._seen(node)
                async for kind, node in self.api.watch(path("v1", "nodes"), version, WATCH_TIMEOUT,
                                                       fieldSelector=selector):
                    if kind in ("ADDED", "MODIFIED"):
                        self._seen(node)
                continue  # the server ended the watch: list again
            except Exception as exc:  # not registered yet, the API is away, 410 Gone: try again
                log.debug("cannot follow Node %s: %s", self.node_name, exc)
            await asyncio.sleep(self.retry_every)
