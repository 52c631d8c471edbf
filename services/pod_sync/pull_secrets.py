"""Registry credentials from a pod's imagePullSecrets, matched to an image as the kubelet's
credential keyring matches them.

A secret of type kubernetes.io/dockerconfigjson (`.dockerconfigjson`: {"auths": {KEY: entry}})
or kubernetes.io/dockercfg (`.dockercfg`: {KEY: entry}) maps registry keys to entries with a
username and password or a base64 `auth`. A key is a registry host (globs allowed per dot-separated
part, `*.example.com`), optionally a port and a path; `https://index.docker.io/v1/` means Docker
Hub. A key matches an image when the hosts and ports match and the key's path is a prefix of the
image's repository path; the most specific keys are tried first.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
from dataclasses import dataclass
from typing import Any

from cri_api.v1 import api_pb2 as cri

from services.pod_sync.pull_records import SecretRef, credential_hash

DOCKER_HUB = "docker.io"
_HUB_ALIASES = {"index.docker.io", "registry-1.docker.io", "docker.io"}
# Entries a pod may carry: enough for any real config, a bound on what a secret can make us hold.
MAX_ENTRIES = 256


class PullSecretInvalid(ValueError):
    """A secret that holds no usable registry credentials; the message says why (never its content)."""


@dataclass(frozen=True)
class _Key:
    host: str     # may hold globs
    port: str
    path: str

    @property
    def specificity(self) -> tuple[int, int]:
        return (len(self.path), -self.host.count("*"))


@dataclass(frozen=True)
class Credential:
    key: str
    username: str
    password: str
    secret: SecretRef | None = None  # the pull secret it came from (services/pod_sync/pull_records.py)

    def auth_config(self) -> cri.AuthConfig:
        return cri.AuthConfig(username=self.username, password=self.password)


def _split_host(hostport: str) -> tuple[str, str]:
    host, _, port = hostport.partition(":")
    return host.lower(), port


def _parse_key(key: str) -> _Key:
    rest = key.strip()
    for scheme in ("https://", "http://"):
        if rest.lower().startswith(scheme):
            rest = rest[len(scheme):]
    hostport, _, path = rest.partition("/")
    path = path.strip("/")
    if path in ("v1", "v2"):  # the registry API's version, not a repository path
        path = ""
    host, port = _split_host(hostport)
    if host in _HUB_ALIASES:
        host = DOCKER_HUB
    return _Key(host, port, path)


def image_location(image: str) -> _Key:
    """Registry host, port and repository path of an image reference."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, port = _split_host(first)
        return _Key(DOCKER_HUB if host in _HUB_ALIASES else host, port, rest)
    return _Key(DOCKER_HUB, "", name if "/" in name else f"library/{name}")


def _host_matches(pattern: str, host: str) -> bool:
    want, have = pattern.split("."), host.split(".")
    return len(want) == len(have) and all(fnmatch.fnmatchcase(h, w) for w, h in zip(want, have, strict=True))


def _matches(key: _Key, image: _Key) -> bool:
    if key.port != image.port or not _host_matches(key.host, image.host):
        return False
    return not key.path or image.path == key.path or image.path.startswith(key.path + "/")


def _entry(key: str, entry: Any, source: tuple[str, str, str] | None) -> Credential:
    if not isinstance(entry, dict):
        raise PullSecretInvalid(f"the entry for {key!r} is not an object")
    username, password = entry.get("username") or "", entry.get("password") or ""
    if entry.get("auth"):
        try:
            username, _, password = base64.b64decode(str(entry["auth"]), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise PullSecretInvalid(f"the auth of {key!r} is not base64 of user:password") from None
    if not isinstance(username, str) or not isinstance(password, str):
        raise PullSecretInvalid(f"the username and password of {key!r} must be strings")
    secret = SecretRef(*source, credential_hash(key, username, password)) if source is not None else None
    return Credential(key, username, password, secret)


def credentials_from_secret(secret_type: str, data: dict[str, str],
                            source: tuple[str, str, str] | None = None) -> list[Credential]:
    """The credentials a (decoded) secret holds; PullSecretInvalid when it holds none usable.
    source: the secret's namespace, name and UID, which the credentials are recorded by."""
    if ".dockerconfigjson" in data:
        field = ".dockerconfigjson"
    elif ".dockercfg" in data:
        field = ".dockercfg"
    else:
        raise PullSecretInvalid(f"type {secret_type or 'Opaque'} has neither .dockerconfigjson nor .dockercfg")
    try:
        doc = json.loads(data[field])
    except ValueError:
        raise PullSecretInvalid(f"{field} is not JSON") from None
    entries = doc.get("auths") if field == ".dockerconfigjson" and isinstance(doc, dict) else doc
    if not isinstance(entries, dict):
        raise PullSecretInvalid(f"{field} has no registry entries")
    if len(entries) > MAX_ENTRIES:
        raise PullSecretInvalid(f"{field} has {len(entries)} entries; at most {MAX_ENTRIES} are read")
    return [_entry(str(k), v, source) for k, v in entries.items()]


def lookup(credentials: list[Credential], image: str) -> list[Credential]:
    """The credentials for image, most specific key first (in the secrets' order on a tie)."""
    where = image_location(image)
    keyed = [(i, _parse_key(c.key), c) for i, c in enumerate(credentials)]
    found = [(k, i, c) for i, k, c in keyed if _matches(k, where)]
    found.sort(key=lambda t: (-t[0].specificity[0], -t[0].specificity[1], t[1]))
    return [c for _, _, c in found]
