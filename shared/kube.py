"""The Kubernetes API as the node's services use it: JSON objects in and out over one httpx
client, behind the kubelet's client-side rate limit (kubeAPIQPS / kubeAPIBurst), one budget for
the whole node (shared/api_budget.py).

The kubeconfig (clusters, contexts, client certificates, tokens, exec plugins) is read by
shared/kubeconfig.py. Requests are plain REST on resource paths: every service works with
API objects as dicts (the manifests it stores, the statuses it writes, what it compares), and
some calls need a DeleteOptions body (UID preconditions, as the kubelet deletes pods) that typed
clients leave out. A typed client's models would also cost each service tens of MiB.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import AsyncIterator
from urllib.parse import quote

import httpx

from shared.api_budget import SharedTokenBucket, budget_file
from shared.json_types import JSONObject
from shared.kubeconfig import KubeconfigError as KubeconfigError  # re-exported: services import it from here
from shared.kubeconfig import load as load_kubeconfig

# Every API call is bounded (seconds); a watch is bounded by its server-side timeout.
REQUEST_TIMEOUT = 30.0
# How long an idle connection to the API server is kept for the next request (client-go's
# transport keeps them 90 s). httpx's default, 5 s, is shorter than the node's own 5-10 s
# cadences (mirror pods, Lease, node status): every one of them paid a new TLS handshake.
IDLE_CONNECTION_TIMEOUT = 90.0
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """The API server answered with an error status (or a watch sent an ERROR event)."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}".rstrip(": "))
        self.status = status
        self.reason = reason
        self.message = message


def path(group_version: str, plural: str, name: str | None = None, namespace: str | None = None,
         subresource: str | None = None) -> str:
    """A resource's URL path; every name is escaped, so none can reach another path."""
    parts = ["api" if "/" not in group_version else "apis", group_version]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource is not None:
        parts.append(subresource)
    return "/" + "/".join(parts)


def _error(resp: httpx.Response) -> ApiError:
    try:
        status = resp.json()
    except ValueError:
        status = {}
    if not isinstance(status, dict):
        status = {}
    return ApiError(resp.status_code, str(status.get("reason") or resp.reason_phrase),
                    str(status.get("message") or resp.text[:200]))


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


class KubeApi:
    def __init__(self, http: httpx.AsyncClient, budget: SharedTokenBucket | None = None) -> None:
        self.http = http
        self._budget = budget

    async def request(self, method: str, url: str, body: object = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> JSONObject:
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        resp = await self.http.request(method, url, content=content, headers=headers, params=params)
        if resp.status_code >= 400:
            raise _error(resp)
        data = resp.json() if resp.content else {}
        return data if isinstance(data, dict) else {}

    async def get(self, url: str, **params: str) -> JSONObject:
        return await self.request("GET", url, params=params or None)

    async def get_or_none(self, url: str) -> JSONObject | None:
        try:
            return await self.get(url)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, url: str, body: JSONObject) -> JSONObject:
        return await self.request("POST", url, body)

    async def patch(self, url: str, body: JSONObject, content_type: str = MERGE_PATCH) -> JSONObject:
        return await self.request("PATCH", url, body, content_type)

    async def delete(self, url: str, grace_period: int | None = None, uid: str | None = None) -> None:
        """Delete; with uid, only the object with that UID (409 if the name is someone else's now)."""
        options: JSONObject = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period is not None:
            options["gracePeriodSeconds"] = grace_period
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        await self.request("DELETE", url, options)

    async def list(self, url: str, **params: str) -> tuple[list[JSONObject], str]:
        """All items (a single page) and the list's resourceVersion, to watch from."""
        data = await self.get(url, **params)
        items = data.get("items") or []
        meta = data.get("metadata") or {}
        return ([i for i in items if isinstance(i, dict)] if isinstance(items, list) else [],
                str(meta.get("resourceVersion", "")) if isinstance(meta, dict) else "")

    async def watch(self, url: str, resource_version: str, timeout_seconds: int,
                    **params: str) -> AsyncIterator[tuple[str, JSONObject]]:
        """(type, object) of each change after resource_version, until the server ends the
        watch (timeout_seconds). An ERROR event raises ApiError: 410 means the version is too
        old, list again."""
        query = {**params, "watch": "1", "resourceVersion": resource_version,
                 "timeoutSeconds": str(timeout_seconds), "allowWatchBookmarks": "true"}
        timeout = httpx.Timeout(REQUEST_TIMEOUT, read=timeout_seconds + REQUEST_TIMEOUT)
        # Uncompressed: the API server (1.37) gzips a watch for a client that accepts it, each
        # flush a gzip member of its own, and httpx's decoder stops after the first member: every
        # event after the initial ones would be lost without an error.
        async with self.http.stream("GET", url, params=query, timeout=timeout,
                                    headers={"Accept-Encoding": "identity"}) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise _error(resp)
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object")
                if not isinstance(obj, dict) or not isinstance(kind, str):
                    raise ApiError(500, "BadWatchEvent", f"unexpected watch event: {line[:200]}")
                if kind == "ERROR":
                    raise ApiError(int(obj.get("code") or 500), str(obj.get("reason") or ""),
                                   str(obj.get("message") or ""))
                yield kind, obj

    async def close(self) -> None:
        await self.http.aclose()
        if self._budget is not None:
            self._budget.close()


async def patch_pod_status(api: KubeApi, namespace: str, name: str, uid: str, status: JSONObject) -> bool:
    """Write a pod's status, only to the pod with this UID; False when that pod is gone (404)
    or the name now belongs to another pod (409)."""
    try:
        await api.patch(path("v1", "pods", name, namespace, "status"), {"metadata": {"uid": uid}, "status": status})
        return True
    except ApiError as exc:
        if exc.status in (404, 409):
            return False
        raise


async def api_client(kubeconfig: Path, qps: float, burst: int, root_dir: Path) -> KubeApi:
    """A client drawing on the node's API budget, kept under root_dir by every service. A
    kubeconfig that cannot be used raises KubeconfigError naming the file and the field."""
    cfg = load_kubeconfig(kubeconfig)
    bucket = SharedTokenBucket(budget_file(root_dir), qps, burst)

    async def take_token(_: httpx.Request) -> None:
        await bucket.acquire()

    http = httpx.AsyncClient(base_url=cfg.server, verify=cfg.verify, auth=cfg.auth, timeout=REQUEST_TIMEOUT,
                             limits=httpx.Limits(keepalive_expiry=IDLE_CONNECTION_TIMEOUT),
                             event_hooks={"request": [take_token]}, trust_env=False)
    return KubeApi(http, bucket)
