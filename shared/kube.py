"""The Kubernetes API client every cluster-mode service uses: a maintained async client
(kubernetes_asyncio) behind the kubelet's client-side rate limit (kubeAPIQPS / kubeAPIBurst),
one budget for the whole node (shared/api_budget.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from shared.api_budget import SharedTokenBucket, budget_file
from shared.json_types import JSONObject


class TokenBucket:
    """qps tokens a second, at most burst saved up; acquire() waits for a token. One process's
    own limit (events, which only the status-reporter posts)."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
                self._last = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self.qps)


class RateLimitedApiClient(client.ApiClient):
    def __init__(self, configuration: client.Configuration, bucket: TokenBucket | SharedTokenBucket) -> None:
        super().__init__(configuration=configuration)
        self._bucket = bucket

    async def call_api(self, *args: Any, **kwargs: Any) -> Any:
        await self._bucket.acquire()
        return await super().call_api(*args, **kwargs)


# Every API call is bounded (seconds); watches set their own server-side timeout.
REQUEST_TIMEOUT = 30
MERGE_PATCH = "application/merge-patch+json"


async def patch_pod_status(core: client.CoreV1Api, namespace: str, name: str, uid: str,
                           status: JSONObject) -> bool:
    """Write a pod's status, only to the pod with this UID; False when that pod is gone (404)
    or the name now belongs to another pod (409)."""
    body = {"metadata": {"uid": uid}, "status": status}
    try:
        # kubernetes_asyncio's bundled .pyi leave out _content_type; the method takes it through
        # **kwargs (it is in its all_params) and sends it as the Content-Type header.
        await core.patch_namespaced_pod_status(name, namespace, body, _content_type=MERGE_PATCH,  # type: ignore[call-arg]
                                               _request_timeout=REQUEST_TIMEOUT)
        return True
    except client.exceptions.ApiException as exc:
        if exc.status in (404, 409):
            return False
        raise


async def api_client(kubeconfig: Path, qps: float, burst: int, root_dir: Path) -> client.ApiClient:
    """A client drawing on the node's API budget, kept under root_dir by every service."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return RateLimitedApiClient(cfg, SharedTokenBucket(budget_file(root_dir), qps, burst))
