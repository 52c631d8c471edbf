"""Which credentials pulled each image, so that a pod may use an image already on the node only
if it could have pulled it (the kubelet 1.37's KubeletEnsureSecretPulledImages, on by default).

An image the node pulled with a pod's imagePullSecret is private to the holders of that secret:
another pod that names it with imagePullPolicy IfNotPresent (or Never) must present the same
secret (the same namespace/name/UID, or a secret whose login is the same) or the node pulls it
again with the pod's own logins, which the registry may refuse. An image pulled without a login
is anyone's. What imagePullCredentialsVerificationPolicy decides is which images are checked:
NeverVerify none; NeverVerifyPreloadedImages (the default) those the node pulled, not those put
there by other means; NeverVerifyAllowlistedImages all but those preloadedImagesVerificationAllowlist
names; AlwaysVerify all.

The records are files, in the kubelet's layout and format, below <root-dir>/image_manager:
pulled/sha256-<hash of the image ID> says which credentials pulled an image, and
pulling/sha256-<hash of the image name> marks a pull under way, so that an image whose pull a
crash interrupted is not taken for a preloaded one. They are not in the store, which is rebuilt
when its schema changes: losing them would make every pulled image look preloaded, and usable by
any pod. A record that cannot be read makes the node verify, never trust."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge

from shared.host.node_dirs import private_dir
from shared.model.image_names import image_without_tag_or_digest

log = logging.getLogger(__name__)

API_VERSION = "kubelet.config.k8s.io/v1beta1"
PREFIX = "sha256-"
NEVER_VERIFY = "NeverVerify"
NEVER_VERIFY_PRELOADED = "NeverVerifyPreloadedImages"
NEVER_VERIFY_ALLOWLISTED = "NeverVerifyAllowlistedImages"
ALWAYS_VERIFY = "AlwaysVerify"
# Matching a pod's secret by its login alone adds the secret to the record, up to this many.
WRITE_WHILE_MATCHING_LIMIT = 100



MUST_PULL_CHECKS = Counter(
    "kubelet_imagemanager_image_mustpull_checks", "Counter for how many times kubelet checked whether credentials "
    "need to be re-verified to access an image", ["result"])
PULL_INTENTS = Gauge("kubelet_imagemanager_ondisk_pullintents", "Number of ImagePullIntents stored on disk.")
PULLED_RECORDS = Gauge("kubelet_imagemanager_ondisk_pulledrecords", "Number of ImagePulledRecords stored on disk.")


class RecordUnreadable(Exception):
    pass


@dataclass(frozen=True)
class SecretRef:
    """A pull secret as the records know it: where it is, and a hash of the login it gave."""

    namespace: str
    name: str
    uid: str
    credential_hash: str

    @property
    def coordinates(self) -> tuple[str, str, str]:
        return self.namespace, self.name, self.uid

    def to_json(self) -> dict[str, str]:
        return {"uid": self.uid, "namespace": self.namespace, "name": self.name, "credentialHash": self.credential_hash}


def credential_hash(registry_key: str, username: str, password: str) -> str:
    return hashlib.sha256(json.dumps([registry_key, username, password]).encode()).hexdigest()


@dataclass
class Policy:
    name: str = NEVER_VERIFY_PRELOADED
    allowlist: list[str] = field(default_factory=list)

    def verifies(self, image: str, pulled_by_node: bool) -> bool:
        if self.name == NEVER_VERIFY:
            return False
        if self.name == ALWAYS_VERIFY:
            return True
        if self.name == NEVER_VERIFY_ALLOWLISTED:
            name = image_without_tag_or_digest(image)
            return not any(name == p or (p.endswith("/*") and name.startswith(p[:-1])) for p in self.allowlist)
        return pulled_by_node


class PullRecords:
    def __init__(self, root: Path, policy: Policy | None = None) -> None:
        self.pulled_dir, self.pulling_dir = root / "pulled", root / "pulling"
        self.policy = policy or Policy()
        self._pulling: dict[str, int] = {}  # image -> pulls under way in this process

    def prepare(self, present: list[tuple[str, list[str]]] | None) -> None:
        """At start: a pull a crash interrupted whose image is here now was the node's, with
        credentials it cannot know: recorded without any (so it is verified); the records of images
        the node no longer has are dropped. present: (image ID, its tags and digests) of every
        image the runtime has; None when the runtime could not say (then the intents stay, and
        their images are verified)."""
        for d in (self.pulled_dir.parent, self.pulled_dir, self.pulling_dir):
            private_dir(d)
        if present is None:
            self._count()
            return
        self.prune({ref for ref, _ in present})
        intents = {}
        for path in self.pulling_dir.iterdir():
            try:
                intents[_read(path)["image"]] = path
            except (RecordUnreadable, KeyError, TypeError) as exc:
                log.warning("image pull intent %s unreadable (%s): removed", path.name, exc)
                path.unlink(missing_ok=True)
        for ref, names in present:
            for name in set(names) & set(intents):
                self._merge(name, ref, None)
                intents.pop(name).unlink(missing_ok=True)
        self._count()

    # -- pulls ----------------------------------------------------------------------------------

    def pulling(self, image: str) -> None:
        if not self._pulling.get(image):
            _write(self.pulling_dir / _filename(image), {"kind": "ImagePullIntent", "apiVersion": API_VERSION,
                                                         "image": image})
        self._pulling[image] = self._pulling.get(image, 0) + 1
        self._count()

    def pulled(self, image: str, ref: str, secret: SecretRef | None) -> None:
        """A pull made: with a pod's secret's login, or with none (anyone may use the image)."""
        try:
            self._merge(image, ref, secret or "anyone")
        except OSError as exc:
            log.error("cannot record which credentials pulled %s (%s): %s", image, ref, exc)
        self._done(image)

    def failed(self, image: str) -> None:
        self._done(image)

    def _done(self, image: str) -> None:
        left = self._pulling.get(image, 1) - 1
        if left > 0:
            self._pulling[image] = left
            return
        self._pulling.pop(image, None)
        (self.pulling_dir / _filename(image)).unlink(missing_ok=True)
        self._count()

    # -- the check ------------------------------------------------------------------------------

    def must_pull(self, image: str, ref: str, pod_secrets: list[SecretRef]) -> bool:
        """Must the pod pull an image that is present (as ref) before it may use it?"""
        required, result = self._check(image, ref, pod_secrets)
        MUST_PULL_CHECKS.labels(result).inc()
        return required

    def _check(self, image: str, ref: str, pod_secrets: list[SecretRef]) -> tuple[bool, str]:
        """(must pull, the kubelet's name for the result)."""
        try:
            record = self._record(ref)
            pulled_by_node = record is not None or bool(self._pulling.get(image)) or \
                (self.pulling_dir / _filename(image)).exists()
        except RecordUnreadable as exc:
            log.error("image pull record of %s unreadable (%s): the pod's credentials are checked by a pull",
                      ref, exc)
            return True, "error"
        if not self.policy.verifies(image, pulled_by_node):
            return False, "credentialPolicyAllowed"
        if record is None:
            return True, "mustAuthenticate"
        cached = (record.get("credentialMapping") or {}).get(image_without_tag_or_digest(image))
        if not isinstance(cached, dict):
            return True, "mustAuthenticate"
        if cached.get("nodePodsAccessible"):
            return False, "credentialRecordFound"
        known = [s for s in cached.get("kubernetesSecrets") or [] if isinstance(s, dict)]
        for mine in pod_secrets:
            for theirs in known:
                same_login = bool(theirs.get("credentialHash")) and theirs.get("credentialHash") == mine.credential_hash
                same_secret = (theirs.get("namespace"), theirs.get("name"), theirs.get("uid")) == mine.coordinates
                if same_login or same_secret:
                    if not (same_login and same_secret) and len(known) < WRITE_WHILE_MATCHING_LIMIT:
                        try:
                            self._merge(image, ref, mine)  # this secret may use it too, from now on
                        except OSError as exc:  # the pod may still use it; the record is only not widened
                            log.warning("cannot add secret %s/%s to the pull record of %s: %s", mine.namespace,
                                        mine.name, image, exc)
                    return False, "credentialRecordFound"
        return True, "mustAuthenticate"

    # -- records --------------------------------------------------------------------------------

    def _record(self, ref: str) -> dict[str, Any] | None:
        path = self.pulled_dir / _filename(ref)
        if not path.exists():
            return None
        record = _read(path)
        return record if record.get("imageRef") == ref else None

    def _merge(self, image: str, ref: str, creds: SecretRef | str | None) -> None:
        """Add what pulled (or may use) an image to its record: a secret, "anyone", or None (a
        record without credentials)."""
        try:
            record = self._record(ref)
        except RecordUnreadable:
            record = None
        if record is not None and creds is None:
            return  # a record already: nothing to add
        record = record or {"kind": "ImagePulledRecord", "apiVersion": API_VERSION, "imageRef": ref,
                            "credentialMapping": {}}
        mapping = record.setdefault("credentialMapping", {})
        key = image_without_tag_or_digest(image)
        entry = mapping.get(key)
        if creds is None:
            pass  # a record without credentials: whoever uses the image is verified
        elif creds == "anyone":
            if entry is not None and entry.get("nodePodsAccessible"):
                return
            mapping[key] = {"nodePodsAccessible": True}
        else:
            assert isinstance(creds, SecretRef)
            if entry is not None and entry.get("nodePodsAccessible"):
                return
            secrets = {(s.get("namespace"), s.get("name"), s.get("uid")): s
                       for s in (entry or {}).get("kubernetesSecrets") or [] if isinstance(s, dict)}
            if secrets.get(creds.coordinates) == creds.to_json():
                return
            secrets[creds.coordinates] = creds.to_json()
            mapping[key] = {"kubernetesSecrets": sorted(secrets.values(), key=lambda s: (
                s.get("namespace") or "", s.get("name") or "", s.get("uid") or ""))}
        record["lastUpdatedTime"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        _write(self.pulled_dir / _filename(ref), record)
        self._count()

    def prune(self, present_refs: set[str]) -> None:
        """Forget the records of images the node no longer has."""
        for path in self.pulled_dir.iterdir():
            try:
                ref = _read(path).get("imageRef")
            except RecordUnreadable:
                ref = None
            if ref not in present_refs:
                path.unlink(missing_ok=True)
        self._count()

    def forget(self, refs: Iterable[str]) -> None:
        """Image GC removed these images: their records go with them."""
        for ref in refs:
            (self.pulled_dir / _filename(ref)).unlink(missing_ok=True)
        self._count()

    def _count(self) -> None:
        """The records and intents on disk, for /metrics (the kubelet's imagemanager_ondisk_*)."""
        for gauge, directory in ((PULL_INTENTS, self.pulling_dir), (PULLED_RECORDS, self.pulled_dir)):
            try:
                gauge.set(sum(1 for name in os.listdir(directory) if name.startswith(PREFIX)
                              and not name.endswith(".tmp")))
            except OSError:
                pass  # the directory is made at start; until then there is nothing to count


def _filename(value: str) -> str:
    return PREFIX + hashlib.sha256(value.encode()).hexdigest()


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise RecordUnreadable(str(exc)) from None
    if not isinstance(data, dict):
        raise RecordUnreadable("not a JSON object")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    os.replace(tmp, path)
