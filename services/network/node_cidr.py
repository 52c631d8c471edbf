"""In cluster mode the Node's spec.podCIDR (set by the controller-manager or an admin) decides
the pod network; the configured podCIDR is the fallback until the Node has one."""

from __future__ import annotations

import asyncio
import logging

from kubernetes_asyncio import client

from shared.kube import REQUEST_TIMEOUT

log = logging.getLogger(__name__)


class NodePodCIDRWatcher:
    def __init__(self, api: client.ApiClient, node_name: str, apply, every: float = 5.0) -> None:
        self.core = client.CoreV1Api(api)
        self.node_name = node_name
        self.apply = apply  # called with the Node's podCIDR ("" while it has none)
        self.every = every

    async def run(self) -> None:
        while True:
            try:
                node = await self.core.read_node(self.node_name, _request_timeout=REQUEST_TIMEOUT)
                self.apply(node.spec.pod_cidr or "")
            except Exception as exc:  # not registered yet, or the API is away: try again
                log.debug("cannot read Node %s: %s", self.node_name, exc)
            await asyncio.sleep(self.every)
