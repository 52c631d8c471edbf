"""What a container's environment needs from the API server: the configMaps and secrets its
env and envFrom name, and the services whose variables the kubelet injects.

`ApiEnvSource` (cluster mode) reads configMaps and secrets when a container is created, as the
kubelet does (the Node authorizer lets a node read those of pods bound to it), and keeps every
service in a cache fed by a watch. `StaticEnvSource` holds fixed objects: the standalone node
(none, and a reference to one is an error naming it) and the unit tests' fake.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from services.pod_sync.pull_secrets import Credential, PullSecretInvalid, credentials_from_secret
from services.pod_sync.service_env import service_env
from shared.api.client import ApiError, KubeApi, path
from shared.model.podspec import Container, Pod
from shared.tasks.retry import keep_running

log = logging.getLogger(__name__)

WATCH_TIMEOUT = 300
RETRY_INITIAL, RETRY_MAX = 1.0, 30.0
# A container created right after pod-sync starts waits this long for the first service list.
SERVICES_SYNC_WAIT = 10.0


class EnvSourceError(Exception):
    """An object the environment needs could not be read; becomes CreateContainerConfigError."""


@dataclass
class EnvObjects:
    """configMap / secret name -> its data (None: not found), and the service variables."""

    config_maps: dict[str, dict[str, str] | None] = field(default_factory=dict)
    secrets: dict[str, dict[str, str] | None] = field(default_factory=dict)
    services: dict[str, str] = field(default_factory=dict)


class EnvSource(Protocol):
    async def gather(self, pod: Pod, c: Container) -> EnvObjects: ...
    async def pull_credentials(self, pod: Pod) -> PullCredentials: ...


@dataclass
class PullCredentials:
    """The registry credentials of a pod's imagePullSecrets, and the secrets that gave none (each
    with why): the kubelet then pulls with what it has and says so."""

    credentials: list[Credential] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, name: str, secret_type: str, data: dict[str, str] | None, missing_why: str = "not found",
            source: tuple[str, str, str] | None = None) -> None:
        """source: the secret's namespace, name and UID."""
        if data is None:
            self.problems.append(f"{name}: {missing_why}")
            return
        try:
            self.credentials.extend(credentials_from_secret(secret_type, data, source))
        except PullSecretInvalid as exc:
            self.problems.append(f"{name}: {exc}")


def referenced(c: Container) -> tuple[set[str], set[str]]:
    """(configMap names, secret names) the container's env and envFrom use."""
    cms: set[str] = set()
    secrets: set[str] = set()
    for e in c.envFrom:
        if e.configMapRef is not None:
            cms.add(e.configMapRef.name)
        if e.secretRef is not None:
            secrets.add(e.secretRef.name)
    for v in c.env:
        if v.valueFrom and "configMapKeyRef" in v.valueFrom:
            cms.add(v.valueFrom["configMapKeyRef"]["name"])
        if v.valueFrom and "secretKeyRef" in v.valueFrom:
            secrets.add(v.valueFrom["secretKeyRef"]["name"])
    return cms, secrets


def secret_data(raw: dict[str, Any]) -> dict[str, str]:
    """A Secret's data, base64-decoded; stringData never reaches a reader."""
    out = {}
    for k, v in (raw.get("data") or {}).items():
        out[k] = base64.b64decode(v or "").decode("utf-8", errors="replace")
    return out


class StaticEnvSource:
    """Fixed objects. api=False: the node has no API server, and a reference to a configMap or
    secret fails with a message saying so (the kubelet's "no kubeClient defined")."""

    def __init__(self, config_maps: dict[tuple[str, str], dict[str, str]] | None = None,
                 secrets: dict[tuple[str, str], dict[str, str]] | None = None,
                 services: list[dict[str, Any]] | None = None, api: bool = True) -> None:
        self.config_maps = config_maps or {}
        self.secrets = secrets or {}
        self.services = services or []
        self.api = api

    async def gather(self, pod: Pod, c: Container) -> EnvObjects:
        ns = pod.metadata.namespace
        cms, secrets = referenced(c)
        if not self.api and (cms or secrets):
            kind, name = ("configMap", sorted(cms)[0]) if cms else ("secret", sorted(secrets)[0])
            raise EnvSourceError(f"couldn't get {kind} {ns}/{name}: this node has no API server "
                                 f"(standalone mode); put the value in env[].value instead")
        return EnvObjects({n: self.config_maps.get((ns, n)) for n in cms},
                          {n: self.secrets.get((ns, n)) for n in secrets},
                          service_env(self.services, ns, pod.spec.enableServiceLinks) if self.api else {})

    async def pull_credentials(self, pod: Pod) -> PullCredentials:
        out = PullCredentials()
        for ref in pod.spec.imagePullSecrets:
            if self.api:
                out.add(ref.name, "", self.secrets.get((pod.metadata.namespace, ref.name)))
            else:
                out.add(ref.name, "", None, "this node has no API server (standalone mode) to read it from")
        return out


class ApiEnvSource:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._services: dict[tuple[str, str], dict[str, Any]] = {}
        self._synced = asyncio.Event()

    async def gather(self, pod: Pod, c: Container) -> EnvObjects:
        ns = pod.metadata.namespace
        cms, secrets = referenced(c)
        objs = EnvObjects()
        for name in sorted(cms):
            raw = await self._read("configMap", "configmaps", ns, name)
            objs.config_maps[name] = None if raw is None else {k: str(v) for k, v in (raw.get("data") or {}).items()}
        for name in sorted(secrets):
            raw = await self._read("secret", "secrets", ns, name)
            objs.secrets[name] = None if raw is None else secret_data(raw)
        try:
            await asyncio.wait_for(self._synced.wait(), SERVICES_SYNC_WAIT)
        except asyncio.TimeoutError:
            log.warning("pod %s/%s: services not listed yet; its containers start without service variables",
                        ns, pod.metadata.name)
        objs.services = service_env(list(self._services.values()), ns, pod.spec.enableServiceLinks)
        return objs

    async def pull_credentials(self, pod: Pod) -> PullCredentials:
        out = PullCredentials()
        for ref in pod.spec.imagePullSecrets:
            try:
                raw = await self._read("secret", "secrets", pod.metadata.namespace, ref.name)
            except EnvSourceError as exc:
                out.add(ref.name, "", None, str(exc))
                continue
            meta = (raw or {}).get("metadata") or {}
            out.add(ref.name, (raw or {}).get("type") or "", None if raw is None else secret_data(raw),
                    source=(pod.metadata.namespace, ref.name, str(meta.get("uid") or "")))
        return out

    async def _read(self, kind: str, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.api.get_or_none(path("v1", plural, name, ns))
        except ApiError as exc:
            raise EnvSourceError(f"couldn't get {kind} {ns}/{name}: {exc.status} {exc.reason}") from None
        except (httpx.HTTPError, OSError, asyncio.TimeoutError) as exc:
            raise EnvSourceError(f"couldn't get {kind} {ns}/{name}: API server unreachable: {exc}") from None

    async def watch_services(self) -> None:
        """Long-running: list every service, then follow changes; relist when the watch ends,
        after a back-off when it fails."""
        await keep_running("watching services", self._list_and_watch_services, log,
                           initial=RETRY_INITIAL, cap=RETRY_MAX)

    async def _list_and_watch_services(self) -> None:
        items, version = await self.api.list(path("v1", "services"))
        self._services = {_key(s): s for s in items}
        self._synced.set()
        try:
            async for kind, obj in self.api.watch(path("v1", "services"), version, WATCH_TIMEOUT):
                if kind == "DELETED":
                    self._services.pop(_key(obj), None)
                elif kind in ("ADDED", "MODIFIED"):
                    self._services[_key(obj)] = obj
        except ApiError as exc:
            if exc.status != 410:  # 410 Gone: start over from a fresh list
                raise


def _key(svc: dict[str, Any]) -> tuple[str, str]:
    meta = svc.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")
