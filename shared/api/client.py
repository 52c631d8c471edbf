"""The Kubernetes API as the node's services use it: JSON objects in and out over one httpx
client, behind the kubelet's client-side rate limit (kubeAPIQPS / kubeAPIBurst), one budget for
the whole node (shared/api/budget.py).

The kubeconfig (clusters, contexts, client certificates, tokens, exec plugins) is read by
shared/api/kubeconfig.py. Requests are plain REST on resource paths: every service works with
API objects as dicts (the manifests it stores, the statuses it writes, what it compares), and
some calls need a DeleteOptions body (UID preconditions, as the kubelet deletes pods) that typed
clients leave out. A typed client's models would also cost each service tens of MiB.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, AsyncGenerator, Awaitable, Callable
from urllib.parse import quote

import httpx
from prometheus_client import Histogram

from shared.api.budget import SharedTokenBucket, budget_file
from shared.api.kubeconfig import KubeconfigError as KubeconfigError  # re-exported: services import it from here
from shared.api.kubeconfig import load as load_kubeconfig
from shared.model.json_types import JSONObject
from shared.model.pod_status import PodStatus

if TYPE_CHECKING:
    from shared.config.settings import NodeSettings

log = logging.getLogger(__name__)

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


class RenewedCertificate:
    """Tells when the client certificate file changed (rotateCertificates renewed it): a changed
    file is looked for at most once a second, by its identity and time (a link's target)."""

    CHECK_EVERY = 1.0

    def __init__(self, cert_file: Path) -> None:
        self.cert_file = cert_file
        self._seen = self._signature()
        self._checked = time.monotonic()

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.cert_file.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def changed(self) -> bool:
        now = time.monotonic()
        if now - self._checked < self.CHECK_EVERY:
            return False
        self._checked = now
        seen = self._signature()
        if seen is None or seen == self._seen:
            return False
        self._seen = seen
        return True

    def forget(self) -> None:
        """Look again at the next check: what changed could not be used yet."""
        self._seen = None

    def in_use(self) -> None:
        """A client was just made with the file as it is now: that is no change to take up."""
        self._seen = self._signature()


class KubeApi:
    # A client replaced by one with a renewed certificate is closed this long after, so that a
    # watch begun on it ends as the server ends it (every watch here asks for 300 s at most).
    OLD_CLIENT_GRACE = 360.0

    def __init__(self, http: httpx.AsyncClient | None, budget: SharedTokenBucket | None = None,
                 renewed: RenewedCertificate | None = None,
                 make_http: Callable[[], httpx.AsyncClient] | None = None,
                 until_usable: Callable[[], Awaitable[None]] | None = None) -> None:
        """http: the client, or None to make it (make_http) at the first request, once
        until_usable returns (a kubeconfig the TLS bootstrap has yet to write)."""
        self._http = http
        self._budget = budget
        self._renewed = renewed
        self._make_http = make_http
        self._until_usable = until_usable
        self._first = asyncio.Lock()
        self._retiring: dict[asyncio.Task[None], httpx.AsyncClient] = {}  # -> the client it closes

    async def _client(self) -> httpx.AsyncClient:
        """The client for the next request: a new one, with the new certificate, once the
        certificate file has changed; requests under way finish on the old one."""
        if self._http is None:
            assert self._make_http is not None
            async with self._first:
                if self._http is None:
                    if self._until_usable is not None:
                        await self._until_usable()
                    self._http = self._make_http()
                    if self._renewed is not None:
                        self._renewed.in_use()
            return self._http
        if self._renewed is not None and self._make_http is not None and self._renewed.changed():
            try:
                fresh = self._make_http()
            except Exception as exc:  # a half-written pair: the next check tries again
                log.warning("client certificate %s changed but cannot be used yet: %s", self._renewed.cert_file, exc)
                self._renewed.forget()
            else:
                old, self._http = self._http, fresh
                log.info("client certificate %s renewed: new connections use it", self._renewed.cert_file)
                task = asyncio.get_running_loop().create_task(self._retire(old), name="retire-old-api-client")
                self._retiring[task] = old
                task.add_done_callback(lambda t: self._retiring.pop(t, None))
        return self._http

    async def _retire(self, old: httpx.AsyncClient) -> None:
        await asyncio.sleep(self.OLD_CLIENT_GRACE)
        await old.aclose()

    async def request(self, method: str, url: str, body: object = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> JSONObject:
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        http = await self._client()
        resp = await http.request(method, url, content=content, headers=headers, params=params)
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
                    **params: str) -> AsyncGenerator[tuple[str, JSONObject], None]:
        """(type, object) of each change after resource_version, until the server ends the
        watch (timeout_seconds). An ERROR event raises ApiError: 410 means the version is too
        old, list again."""
        query = {**params, "watch": "1", "resourceVersion": resource_version,
                 "timeoutSeconds": str(timeout_seconds), "allowWatchBookmarks": "true"}
        timeout = httpx.Timeout(REQUEST_TIMEOUT, read=timeout_seconds + REQUEST_TIMEOUT)
        # Uncompressed: the API server (1.37) gzips a watch for a client that accepts it, each
        # flush a gzip member of its own, and httpx's decoder stops after the first member: every
        # event after the initial ones would be lost without an error.
        http = await self._client()
        async with http.stream("GET", url, params=query, timeout=timeout,
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
        for task, old in list(self._retiring.items()):
            task.cancel()
            await old.aclose()
        if self._http is not None:
            await self._http.aclose()
        if self._budget is not None:
            self._budget.close()


async def patch_pod_status(api: KubeApi, namespace: str, name: str, uid: str, status: PodStatus) -> bool:
    """Write a pod's status, only to the pod with this UID; False when that pod is gone (404)
    or the name now belongs to another pod (409)."""
    try:
        await api.patch(path("v1", "pods", name, namespace, "status"), {"metadata": {"uid": uid}, "status": status})
        return True
    except ApiError as exc:
        if exc.status in (404, 409):
            return False
        raise


# client-go's metric, which the kubelet exports: how long each request waited for the node's
# kubeAPIQPS / kubeAPIBurst budget.
RATE_LIMITER_SECONDS = Histogram("rest_client_rate_limiter_duration_seconds",
                                 "Client side rate limiter latency in seconds. Broken down by verb, and host.",
                                 ["verb", "host"],
                                 buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0))


def _client_factory(kubeconfig: Path, bucket: SharedTokenBucket,
                    renewed_cert: Path | None) -> Callable[[], httpx.AsyncClient]:
    async def take_token(request: httpx.Request) -> None:
        started = time.monotonic()
        await bucket.acquire()
        host = request.url.host + (f":{request.url.port}" if request.url.port else "")
        RATE_LIMITER_SECONDS.labels(verb=request.method, host=host).observe(time.monotonic() - started)

    def make_http() -> httpx.AsyncClient:
        override = renewed_cert if renewed_cert is not None and renewed_cert.exists() else None
        cfg = load_kubeconfig(kubeconfig, override)
        return httpx.AsyncClient(base_url=cfg.server, verify=cfg.verify, auth=cfg.auth, timeout=REQUEST_TIMEOUT,
                                 limits=httpx.Limits(keepalive_expiry=IDLE_CONNECTION_TIMEOUT),
                                 event_hooks={"request": [take_token]}, trust_env=False)
    return make_http


async def api_client(kubeconfig: Path, qps: float, burst: int, root_dir: Path) -> KubeApi:
    """A client drawing on the node's API budget, kept under root_dir by every service. A
    kubeconfig that cannot be used raises KubeconfigError naming the file and the field."""
    bucket = SharedTokenBucket(budget_file(root_dir), qps, burst)
    make_http = _client_factory(kubeconfig, bucket, None)
    return KubeApi(make_http(), bucket)


BOOTSTRAP_WAIT = 3600.0 + 60.0  # the TLS bootstrap's own limit, and a margin


def node_api_client(settings: NodeSettings) -> KubeApi:
    """The node's client, as every service makes it from its settings.

    With rotateCertificates the cert dir's current pair (shared/api/client_cert.py) is the client's
    certificate once there is one, and each renewal of it is taken up. With a bootstrap
    kubeconfig the client is made at its first request, once the TLS bootstrap (the
    status-reporter's) has written a usable kubeconfig: requests wait for that meanwhile. Without
    one a kubeconfig that cannot be used raises KubeconfigError here, at the service's start."""
    from shared.api.client_cert import current_path, kubeconfig_usable

    kubeconfig = settings.kubeconfig
    assert kubeconfig is not None, "cluster mode only"
    k = settings.kubelet
    bucket = SharedTokenBucket(budget_file(settings.root_dir), k.kube_api_qps, k.kube_api_burst)
    renewed_cert = current_path(settings.cert_dir) if k.rotate_certificates else None
    make_http = _client_factory(kubeconfig, bucket, renewed_cert)
    renewed = RenewedCertificate(renewed_cert) if renewed_cert is not None else None
    if settings.bootstrap_kubeconfig is None:
        return KubeApi(make_http(), bucket, renewed, make_http)

    async def until_usable() -> None:
        loop = asyncio.get_running_loop()
        start, said = loop.time(), -math.inf
        while True:
            usable, why = kubeconfig_usable(kubeconfig)
            if usable:
                return
            waited = loop.time() - start
            if waited > BOOTSTRAP_WAIT:
                raise KubeconfigError(f"no usable kubeconfig after {waited:.0f}s of TLS bootstrap ({why}); "
                                      "the status-reporter's log says why (`pykubelet logs status-reporter`)")
            if waited - said >= 30:
                log.info("waiting for the TLS bootstrap to write %s (%s)", kubeconfig, why)
                said = waited
            await asyncio.sleep(1.0)

    return KubeApi(None, bucket, renewed, make_http, until_usable)
