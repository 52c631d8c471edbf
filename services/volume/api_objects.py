"""configMaps, secrets, tokens and storage objects from the API server (cluster mode).

How a change of a configMap or secret a pod's volumes use is found follows
configMapAndSecretChangeDetectionStrategy, as in the kubelet:
- `Get`: every read is a GET; the volume manager's resync (every 10 s) brings a change.
- `Cache`: a read within the object's TTL comes from the last GET. The TTL is the Node's
  `node.alpha.kubernetes.io/ttl` annotation (seconds; the TTL controller sets it by cluster
  size), else 60 s, the Node read again at most every TTL_READ_EVERY. A pod seen for the first
  time reads its objects afresh (the kubelet's RegisterPod), and so moves the cache on for every
  pod that shares them.
- `Watch` (the default): configMaps and secrets are watched one object at a time (a field selector
on metadata.name, which the Node authorizer allows for objects of pods bound to this node), so
a change reaches the volume within a second; reads come from that cache. Each watch holds an
HTTP/1.1 connection to the API server (the kubelet multiplexes its watches over HTTP/2), so at
most MAX_WATCHES objects are watched: pods that refer to more objects than that (one hostile
pod can name thousands) get the rest read again when the cached copy is older than POLL_TTL,
as the kubelet's `Cache` change detection strategy does, instead of a connection and an fd each. Service-account tokens
come from TokenRequest, bound to the pod, and are renewed once 80% of their lifetime has passed
(or after 24 hours), as the kubelet's token manager does. Pod certificates come from
PodCertificateRequests (services.volume.pod_certificates).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from services.volume.objects import ObjectUnavailable
from services.volume.pod_certificates import PodCertificates
from shared.api.client import ApiError, KubeApi, path
from shared.bus.events import Recorder
from shared.model.podspec import Pod

log = logging.getLogger(__name__)

WATCH, CACHE, GET = "Watch", "Cache", "Get"
STRATEGIES = (WATCH, CACHE, GET)
WATCH_TIMEOUT = 300
MAX_WATCHES = 100
POLL_TTL = 60.0  # the kubelet's default object cache TTL
NODE_TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
TTL_READ_EVERY = 10.0
_GO_ATOI = re.compile(r"[+-]?[0-9]+")
RETRY = 5.0
MAX_TOKEN_AGE = 24 * 3600
PLURAL = {"configmap": "configmaps", "secret": "secrets"}
STORAGE = "storage.k8s.io/v1"
CERTIFICATES = "certificates.k8s.io/v1"


@dataclass
class _Token:
    value: str
    issued: float   # wall clock seconds
    expires: float


def token_needs_refresh(tok: _Token, now: float) -> bool:
    """The kubelet's rule: older than 80% of its lifetime, or older than 24 hours."""
    ttl = tok.expires - tok.issued
    return now > tok.issued + 0.8 * ttl or now > tok.issued + MAX_TOKEN_AGE


class ApiObjects:
    def __init__(self, api: KubeApi, on_change: Callable[[str, str, str], None] | None = None,
                 max_watches: int = MAX_WATCHES, clock: Callable[[], float] = time.monotonic,
                 strategy: str = WATCH, node_name: str = "", events: Recorder | None = None) -> None:
        self.api = api
        self.on_change = on_change  # (kind, namespace, name) of a watched object that changed
        self.max_watches = max_watches
        self.strategy = strategy
        self.node_name = node_name  # whose TTL annotation the Cache strategy reads
        self._clock = clock
        self._ttl: tuple[float, float] | None = None  # Cache: (read at, seconds)
        self._registered: set[str] = set()  # pods whose objects were read since they were first seen
        self._cache: dict[tuple[str, str, str], dict[str, Any] | None] = {}
        self._watches: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._read_at: dict[tuple[str, str, str], float] = {}  # objects read, not watched: when
        self._tokens: dict[tuple[Any, ...], _Token] = {}
        self._node_uid = ""
        self.events = events
        self.certificates = PodCertificates(self._pod_event)

    async def _get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._read(kind, path("v1", PLURAL[kind], name, namespace), name)

    async def _watched(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        key = (kind, namespace, name)
        if key in self._cache and key in self._watches and not self._watches[key].done():
            return self._cache[key]
        if key not in self._watches and len(self._watches) >= self.max_watches:
            return await self._polled(key)
        value = await self._get(kind, namespace, name)
        self._cache[key] = value
        self._read_at.pop(key, None)
        if key not in self._watches or self._watches[key].done():
            self._watches[key] = asyncio.create_task(self._watch(key), name=f"volume:watch-{kind}-{namespace}-{name}")
        return value

    async def _polled(self, key: tuple[str, str, str]) -> dict[str, Any] | None:
        if not self._read_at:
            log.warning("%d configMaps and secrets are watched already (the most this node watches): "
                        "%s %s/%s and any more are read again every %.0fs instead", len(self._watches), *key,
                        POLL_TTL)
        return await self._cached(key, POLL_TTL)

    async def _cached(self, key: tuple[str, str, str], ttl: float) -> dict[str, Any] | None:
        read_at = self._read_at.get(key)
        if read_at is not None and self._clock() - read_at < ttl:
            return self._cache[key]
        value = await self._get(*key)
        self._cache[key], self._read_at[key] = value, self._clock()
        return value

    async def _object_ttl(self) -> float:
        """Cache: the Node's TTL annotation (a decimal integer, as Go's Atoi reads it), else 60 s,
        also when the Node cannot be read."""
        now = self._clock()
        if self._ttl is None or now - self._ttl[0] >= TTL_READ_EVERY:
            ttl = POLL_TTL
            try:
                node = await self.api.get_or_none(path("v1", "nodes", self.node_name)) or {}
                value = ((node.get("metadata") or {}).get("annotations") or {}).get(NODE_TTL_ANNOTATION)
                if isinstance(value, str) and _GO_ATOI.fullmatch(value):
                    ttl = float(int(value))
            except ApiError as exc:
                log.warning("cannot read Node %s for its %s annotation (%s %s); configMaps and secrets are read "
                            "again every %.0fs", self.node_name, NODE_TTL_ANNOTATION, exc.status, exc.reason, ttl)
            self._ttl = (now, ttl)
        return self._ttl[1]

    async def _object(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if self.strategy == GET:
            return await self._get(kind, namespace, name)
        if self.strategy == CACHE:
            return await self._cached((kind, namespace, name), await self._object_ttl())
        return await self._watched(kind, namespace, name)

    def register_pod(self, uid: str, refs: set[tuple[str, str, str]]) -> None:
        """Before a pod's volumes are set up: under Cache, a pod seen for the first time reads the
        objects it refers to afresh (the kubelet's RegisterPod), so a new pod never starts on data
        older than itself."""
        if uid in self._registered:
            return
        self._registered.add(uid)
        if self.strategy == CACHE:
            for key in refs:
                self._read_at.pop(key, None)

    async def _watch(self, key: tuple[str, str, str]) -> None:
        kind, namespace, name = key
        while True:
            try:
                # No resourceVersion: the server first sends the object as it is now (ADDED).
                async for event, raw in self.api.watch(path("v1", PLURAL[kind], namespace=namespace), "",
                                                       WATCH_TIMEOUT, fieldSelector=f"metadata.name={name}"):
                    value = None if event == "DELETED" else raw
                    if event in ("ADDED", "MODIFIED", "DELETED") and self._cache.get(key) != value:
                        self._cache[key] = value
                        self._changed(kind, namespace, name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # watch broke: re-read (it may have changed meanwhile), watch again
                log.warning("watch of %s %s/%s failed: %s; retrying in %.0fs", kind, namespace, name, exc, RETRY)
                await asyncio.sleep(RETRY)
                try:
                    value = await self._get(kind, namespace, name)
                    if self._cache.get(key) != value:
                        self._cache[key] = value
                        self._changed(kind, namespace, name)
                except ObjectUnavailable as exc2:
                    log.warning("re-reading %s %s/%s failed: %s", kind, namespace, name, exc2)

    def _changed(self, kind: str, namespace: str, name: str) -> None:
        if self.on_change is not None:
            self.on_change(kind, namespace, name)

    async def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._object("configmap", namespace, name)

    async def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._object("secret", namespace, name)

    async def service_account_token(self, pod: Pod, audience: str, expiration_seconds: int) -> str:
        sa = pod.spec.serviceAccountName or "default"
        key = (pod.uid, pod.metadata.namespace, sa, audience, expiration_seconds)
        tok = self._tokens.get(key)
        if tok is not None and not token_needs_refresh(tok, time.time()):
            return tok.value
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [audience] if audience else [], "expirationSeconds": expiration_seconds,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                                            "uid": pod.uid}}}
        try:
            resp = await self.api.create(path("v1", "serviceaccounts", sa, pod.metadata.namespace, "token"), body)
        except ApiError as exc:
            if tok is not None and time.time() < tok.expires:
                log.warning("token refresh for %s/%s failed (%s %s); the current token is still valid",
                            pod.metadata.namespace, sa, exc.status, exc.reason)
                return tok.value
            raise ObjectUnavailable(f'failed to fetch token for service account "{sa}": {exc.status} '
                                    f"{exc.reason}") from None
        status = resp.get("status") or {}
        try:
            expires_at = datetime.fromisoformat(status["expirationTimestamp"]).timestamp()
        except (KeyError, TypeError, ValueError):
            expires_at = time.time() + expiration_seconds
        token: str = status["token"]
        self._tokens[key] = _Token(token, time.time(), expires_at)
        return token

    async def _read(self, what: str, url: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.api.get_or_none(url)
        except ApiError as exc:
            raise ObjectUnavailable(f'{what} "{name}": {exc.status} {exc.reason}') from None

    async def persistent_volume_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._read("PersistentVolumeClaim",
                                path("v1", "persistentvolumeclaims", name, namespace), name)

    async def persistent_volume(self, name: str) -> dict[str, Any] | None:
        return await self._read("PersistentVolume", path("v1", "persistentvolumes", name), name)

    async def csi_driver(self, name: str) -> dict[str, Any] | None:
        return await self._read("CSIDriver", path(STORAGE, "csidrivers", name), name)

    async def volume_attachment(self, name: str) -> dict[str, Any] | None:
        return await self._read("VolumeAttachment", path(STORAGE, "volumeattachments", name), name)

    async def cluster_trust_bundle(self, name: str) -> dict[str, Any] | None:
        return await self._read("ClusterTrustBundle", path(CERTIFICATES, "clustertrustbundles", name), name)

    async def cluster_trust_bundles(self, label_selector: str) -> list[dict[str, Any]]:
        try:
            items, _ = await self.api.list(path(CERTIFICATES, "clustertrustbundles"), labelSelector=label_selector)
        except ApiError as exc:
            raise ObjectUnavailable(f"while listing ClusterTrustBundles: {exc.status} {exc.reason}") from None
        return items

    def _pod_event(self, pod: Pod, type_: str, reason: str, message: str) -> None:
        if self.events is not None:
            self.events.pod(pod.metadata.namespace, pod.metadata.name, str(pod.uid), type_, reason, message)

    async def pod_certificate(self, pod: Pod, volume: str, index: int, source: dict[str, Any]) -> tuple[bytes, bytes]:
        return await self.certificates.bundle(self, pod, volume, index, source)

    async def service_account_uid(self, namespace: str, name: str) -> str:
        sa = await self._read("ServiceAccount", path("v1", "serviceaccounts", name, namespace), name)
        if sa is None:
            raise ObjectUnavailable(f'while fetching service account: serviceaccounts "{name}" not found')
        return str(sa["metadata"]["uid"])

    async def node_uid(self) -> str:
        if not self._node_uid:  # a node's UID is that of its object for good
            node = await self._read("Node", path("v1", "nodes", self.node_name), self.node_name)
            if node is None:
                raise ObjectUnavailable(f'while getting node object: nodes "{self.node_name}" not found')
            self._node_uid = str(node["metadata"]["uid"])
        return self._node_uid

    async def create_pod_certificate_request(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.api.create(path(CERTIFICATES, "podcertificaterequests", namespace=namespace), body)
        except ApiError as exc:
            raise ObjectUnavailable(f"while creating on API: {exc.status} {exc.reason}") from None

    async def pod_certificate_request(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._read("PodCertificateRequest",
                                path(CERTIFICATES, "podcertificaterequests", name, namespace), name)

    def forget_pod(self, uid: str) -> None:
        self.certificates.forget(uid)
        self._registered.discard(uid)
        for key in [k for k in self._tokens if k[0] == uid]:
            del self._tokens[key]

    def stop_unused_watches(self, referenced: set[tuple[str, str, str]]) -> None:
        """Stop watching objects no pod's volumes refer to any more."""
        for key in [k for k in self._watches if k not in referenced]:
            self._watches.pop(key).cancel()
            self._cache.pop(key, None)
        for key in [k for k in self._read_at if k not in referenced]:
            del self._read_at[key]
            self._cache.pop(key, None)

    async def close(self) -> None:
        for task in self._watches.values():
            task.cancel()
        await asyncio.gather(*self._watches.values(), return_exceptions=True)
        self._watches.clear()
