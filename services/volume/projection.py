"""The files of configMap, secret, downwardAPI and projected volumes, as the kubelet lays them out.

Each builder returns the whole payload {relative path: FileProjection}; the atomic writer then
makes the directory hold exactly that."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from services.volume import trust_bundles
from services.volume.atomic_writer import FileProjection, PayloadError, validate_path
from services.volume.objects import ObjectSource, ObjectUnavailable
from services.volume.pod_certificates import PodCertificateError
from shared.model.downward_api import metadata_field, resource_field
from shared.model.podspec import Pod

DEFAULT_MODE = 0o644
DEFAULT_TOKEN_EXPIRATION = 3600
MIN_TOKEN_EXPIRATION = 600


class VolumeSourceError(Exception):
    """The volume cannot be set up as specified; the message is what the user sees."""


@dataclass(frozen=True)
class NodeAllocatable:
    cpu_millicores: int
    memory_bytes: int


def _mode(value: Any, default: int, where: str) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or not 0 <= value <= 0o777:
        raise VolumeSourceError(f"{where}: mode {value!r} must be between 0 and 0777 (511)")
    return value


def _key_values(obj: dict[str, Any], secret: bool) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in (obj.get("data") or {}).items():
        out[key] = base64.b64decode(value) if secret else str(value).encode()
    if not secret:
        for key, value in (obj.get("binaryData") or {}).items():
            out[key] = base64.b64decode(value)
    return out


def _items(values: dict[str, bytes], items: list[dict[str, Any]] | None, mode: int, what: str,
           optional: bool) -> dict[str, FileProjection]:
    """All keys as file names, or only `items` (key -> path, optional mode)."""
    if not items:
        return {k: FileProjection(v, mode) for k, v in values.items()}
    payload: dict[str, FileProjection] = {}
    for item in items:
        key, path = item.get("key", ""), item.get("path", "")
        if key not in values:
            if optional:
                continue
            raise VolumeSourceError(f'{what}: configuration key "{key}" not found')
        payload[path] = FileProjection(values[key], _mode(item.get("mode"), mode, f"{what} item {key}"))
    return payload


async def _object_files(objects: ObjectSource, kind: str, namespace: str, source: dict[str, Any],
                        mode: int) -> dict[str, FileProjection]:
    secret = kind == "secret"
    name = source.get("secretName" if secret and "secretName" in source else "name", "")
    optional = bool(source.get("optional"))
    what = f'{kind.lower()} "{name}"'
    if not name:
        raise VolumeSourceError(f"{kind}: a name is required")
    obj = await (objects.secret(namespace, name) if secret else objects.config_map(namespace, name))
    if obj is None:
        if optional:
            return {}
        raise VolumeSourceError(f'{kind.lower()} "{name}" not found')
    return _items(_key_values(obj, secret), source.get("items"), mode, what, optional)


def _downward_files(pod: Pod, items: list[dict[str, Any]], mode: int, node: NodeAllocatable) -> dict[str, FileProjection]:
    payload: dict[str, FileProjection] = {}
    for item in items:
        path = item.get("path", "")
        try:
            if "fieldRef" in item:
                value = metadata_field(pod, item["fieldRef"].get("fieldPath", ""))
            elif "resourceFieldRef" in item:
                value = resource_field(pod, None, item["resourceFieldRef"], node.cpu_millicores, node.memory_bytes)
            else:
                raise ValueError("one of fieldRef or resourceFieldRef is required")
        except ValueError as exc:
            raise VolumeSourceError(f"downwardAPI item {path!r}: {exc}") from None
        payload[path] = FileProjection(value.encode(), _mode(item.get("mode"), mode, f"downwardAPI item {path}"))
    return payload


def fs_user(pod: Pod) -> int | None:
    """The user every container of the pod runs as, if they all run as one that the manifest
    names (the kubelet's FsUserFrom); None otherwise."""
    users = {c.securityContext.runAsUser if c.securityContext and c.securityContext.runAsUser is not None
             else pod.spec.securityContext.runAsUser for c in pod.spec.all_containers}
    return users.pop() if len(users) == 1 and None not in users else None


def _credential(data: bytes, pod: Pod, mode: int) -> FileProjection:
    """A token, trust bundle, key or certificate file: owned by the pod's one user and 0600 when
    the pod has one or an fsGroup (which then gives its group read access), as the kubelet
    makes them; the volume's mode otherwise."""
    user = fs_user(pod)
    if user is None and pod.spec.securityContext.fsGroup is None:
        return FileProjection(data, mode)
    return FileProjection(data, 0o600, user)


async def _projected_files(source: dict[str, Any], pod: Pod, objects: ObjectSource, node: NodeAllocatable,
                           volume: str, mode: int) -> dict[str, FileProjection]:
    """Every source is tried, as the kubelet tries them: one that fails (a certificate not issued
    yet) does not hold back the next (whose request is then made at once). The errors are told
    together, as the kubelet's aggregate: one alone as it is, several as [a, b]."""
    payload: dict[str, FileProjection] = {}
    errors: list[str] = []
    for i, part in enumerate(source.get("sources") or []):
        try:
            payload.update(await _source_files(i, part, pod, objects, node, volume, mode))
        except (VolumeSourceError, ObjectUnavailable) as exc:
            if str(exc) not in errors:
                errors.append(str(exc))
    if errors:
        raise VolumeSourceError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
    return payload


async def _source_files(i: int, part: dict[str, Any], pod: Pod, objects: ObjectSource, node: NodeAllocatable,
                        volume: str, mode: int) -> dict[str, FileProjection]:
    ns = pod.metadata.namespace
    if "configMap" in part:
        return await _object_files(objects, "configMap", ns, part["configMap"], mode)
    if "secret" in part:
        # In a projected volume the secret is named by "name", not "secretName".
        return await _object_files(objects, "secret", ns, part["secret"], mode)
    if "downwardAPI" in part:
        return _downward_files(pod, part["downwardAPI"].get("items") or [], mode, node)
    if "serviceAccountToken" in part:
        token = part["serviceAccountToken"]
        return {token.get("path", "token"): _credential(await _token(objects, pod, token), pod, mode)}
    if "clusterTrustBundle" in part:
        bundle = part["clusterTrustBundle"]
        try:
            pem = await trust_bundles.project(objects, bundle)
        except trust_bundles.TrustBundleError as exc:
            raise VolumeSourceError(str(exc)) from None
        return {str(bundle.get("path", "")): _credential(pem, pod, mode)}
    if "podCertificate" in part:
        return await _pod_certificate_files(objects, pod, volume, i, part["podCertificate"], mode)
    raise VolumeSourceError(f"projected.sources[{i}]: unsupported source {sorted(part)}")


async def _token(objects: ObjectSource, pod: Pod, token: dict[str, Any]) -> bytes:
    expiration = int(token.get("expirationSeconds", DEFAULT_TOKEN_EXPIRATION))
    if expiration < MIN_TOKEN_EXPIRATION:
        raise VolumeSourceError(f"serviceAccountToken.expirationSeconds must be at least "
                                f"{MIN_TOKEN_EXPIRATION}, got {expiration}")
    return (await objects.service_account_token(pod, token.get("audience", ""), expiration)).encode()


async def build_payload(kind: str, source: dict[str, Any], pod: Pod, objects: ObjectSource,
                        node: NodeAllocatable, volume: str = "") -> dict[str, FileProjection]:
    """The files of one volume (named `volume`) of kind configMap, secret, downwardAPI or projected."""
    mode = _mode(source.get("defaultMode"), DEFAULT_MODE, f"{kind}.defaultMode")
    ns = pod.metadata.namespace
    try:
        if kind in ("configMap", "secret"):
            payload = await _object_files(objects, kind, ns, source, mode)
        elif kind == "downwardAPI":
            payload = _downward_files(pod, source.get("items") or [], mode, node)
        elif kind == "projected":
            payload = await _projected_files(source, pod, objects, node, volume, mode)
        else:
            raise VolumeSourceError(f"{kind} is not a projected volume kind")
    except ObjectUnavailable as exc:
        raise VolumeSourceError(str(exc)) from None
    for rel in payload:
        try:
            validate_path(rel)
        except PayloadError as exc:
            raise VolumeSourceError(f"{kind}: {exc}") from None
    return payload


async def _pod_certificate_files(objects: ObjectSource, pod: Pod, volume: str, index: int, source: dict[str, Any],
                                 mode: int) -> dict[str, FileProjection]:
    """The key and chain of a podCertificate source: together in credentialBundlePath (the key's
    PEM block first), and/or apart in keyPath and certificateChainPath."""
    try:
        key, chain = await objects.pod_certificate(pod, volume, index, source)
    except PodCertificateError as exc:
        raise VolumeSourceError(str(exc)) from None
    files = {}
    for field, data in (("credentialBundlePath", key + chain), ("keyPath", key), ("certificateChainPath", chain)):
        if source.get(field):
            files[str(source[field])] = _credential(data, pod, mode)
    return files


def keeps_secrets(kind: str) -> bool:
    """Secrets and tokens live on tmpfs, never on disk (the kubelet's memory-backed wrapper)."""
    return kind in ("secret", "projected")
