"""projected.sources[].podCertificate (PodCertificateRequest, GA in Kubernetes 1.37): a private key
made on the node for the pod, and the certificate chain a signer issues for it through a
PodCertificateRequest, as the kubelet's podcertificate manager does it.

Each source (pod, volume, index in the volume's sources) goes through these states:

    initial ──create a PCR──> waiting ──Issued──> fresh ──beginRefreshAt──> refreshing ──Issued──> fresh
                                 │ Denied / Failed                              │ Denied / Failed
                                 └──────────────> denied / failed (for good) <──┘

Until the first certificate is issued the volume cannot be set up (the pod waits, its containers
are not started); while a refresh is pending the current key and chain stay in the volume. A
request that vanished (deleted before it was answered) is made again once ASSUME_DELETED has
passed since it was made. The state lives in memory, as in the kubelet: after a restart each
source asks again, and the files already written stay until a new certificate replaces them.

The states are advanced when the volume is set up (at each resync, every RESYNC_PERIOD of the
volume service, and on each retry of a pod whose volume is not ready yet)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Protocol

from services.volume.pem import certificate_pem, pem_blocks
from shared.model.podspec import Pod

log = logging.getLogger(__name__)

CERTIFICATES = "certificates.k8s.io/v1"
KEY_TYPES = ("RSA3072", "RSA4096", "ECDSAP256", "ECDSAP384", "ECDSAP521", "ED25519")
# The API server's bounds on maxExpirationSeconds.
MIN_EXPIRATION, MAX_EXPIRATION = 3600, 7862400
ASSUME_DELETED = 600.0  # a request not found this long after it was made is made again
REFRESH_OVERDUE = 600.0  # a refresh not issued this long after beginRefreshAt is told in an event
JITTER = 300.0  # each deadline is moved by up to this, so that a node's sources do not ask at once
# Keys are made one at a time, as the kubelet's single projection worker makes them: a pod with
# hundreds of RSA4096 sources keeps this thread busy, not the threads every other volume's files
# are written in.
_KEYGEN = ThreadPoolExecutor(1, thread_name_prefix="pod-certificate-keys")

INITIAL, WAITING, DENIED, FAILED, FRESH, REFRESHING = "initial", "waiting", "denied", "failed", "fresh", "refreshing"


class PodCertificateError(Exception):
    """The source's files cannot be written now (or ever); the message is the kubelet's."""


class PodCertificateApi(Protocol):
    """What the states need of the API server (services.volume.objects.ObjectSource has it)."""

    node_name: str

    async def service_account_uid(self, namespace: str, name: str) -> str: ...

    async def node_uid(self) -> str: ...

    async def create_pod_certificate_request(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def pod_certificate_request(self, namespace: str, name: str) -> dict[str, Any] | None: ...


EventSink = Callable[[Pod, str, str, str], None]  # (pod, type, reason, message)


@dataclass
class _Pending:
    key: bytes  # PEM (PKCS#8) of the key the request is for
    name: str  # the PodCertificateRequest's name
    abandon_at: float


@dataclass
class _Source:
    signer: str
    state: str = INITIAL
    key: bytes = b""
    chain: bytes = b""
    begin_refresh_at: float = 0.0
    not_after: float = 0.0
    pending: _Pending | None = None
    reason: str = ""
    message: str = ""
    told: set[str] = field(default_factory=set)  # events already emitted for this certificate


def validate(source: dict[str, Any]) -> None:
    """What the API server checks, checked again here: a static pod's manifest (or a stale API
    server) does not pass through it."""
    if not isinstance(source.get("signerName"), str) or not source["signerName"]:
        raise PodCertificateError("podCertificate.signerName is required")
    if source.get("keyType") not in KEY_TYPES:
        raise PodCertificateError(f"podCertificate.keyType {source.get('keyType')!r} is not one of {', '.join(KEY_TYPES)}")
    expiration = source.get("maxExpirationSeconds")
    if expiration is not None and (not isinstance(expiration, int) or not MIN_EXPIRATION <= expiration <= MAX_EXPIRATION):
        raise PodCertificateError(f"podCertificate.maxExpirationSeconds {expiration!r} must be between "
                                  f"{MIN_EXPIRATION} and {MAX_EXPIRATION}")
    annotations = source.get("userAnnotations")
    if annotations is not None and not (isinstance(annotations, dict)
                                        and all(isinstance(k, str) and isinstance(v, str) for k, v in annotations.items())):
        raise PodCertificateError("podCertificate.userAnnotations must map strings to strings")
    if not any(source.get(p) for p in ("credentialBundlePath", "keyPath", "certificateChainPath")):
        raise PodCertificateError("podCertificate needs credentialBundlePath, or keyPath and certificateChainPath")


def new_key_and_request(key_type: str) -> tuple[bytes, bytes]:
    """A fresh private key (PEM, PKCS#8) and a PKCS#10 request signed with it (DER) that carries
    nothing but its public key, as the kubelet makes them. RSA keys take a while: call in a thread.
    cryptography is imported here, by the first pod that has a podCertificate source: the volume
    service of a node without one does not carry its 48 modules."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
    if key_type in ("RSA3072", "RSA4096"):
        key = rsa.generate_private_key(65537, int(key_type[3:]))
    elif key_type.startswith("ECDSA"):
        key = ec.generate_private_key({"ECDSAP256": ec.SECP256R1(), "ECDSAP384": ec.SECP384R1(),
                                       "ECDSAP521": ec.SECP521R1()}[key_type])
    elif key_type == "ED25519":
        key = ed25519.Ed25519PrivateKey.generate()
    else:
        raise PodCertificateError(f'while generating keypair: unknown key type "{key_type}"')
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    request = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, algorithm)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    return pem, request.public_bytes(serialization.Encoding.DER)


def clean_chain(text: str) -> bytes:
    """The issued chain with every PEM block written again as a plain CERTIFICATE block (no
    headers, nothing between blocks), as the kubelet writes it."""
    return b"".join(certificate_pem(der) for _, der in pem_blocks(text.encode()))


def _time(value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return 0.0


class PodCertificates:
    def __init__(self, event: EventSink, clock: Callable[[], float] = time.time,
                 jitter: Callable[[], float] = lambda: random.uniform(0, JITTER)) -> None:
        self.event = event
        self.clock = clock
        self.jitter = jitter
        self._sources: dict[tuple[str, str, int], _Source] = {}

    async def bundle(self, api: PodCertificateApi, pod: Pod, volume: str, index: int,
                     source: dict[str, Any]) -> tuple[bytes, bytes]:
        """The source's private key (PEM) and certificate chain (PEM) to write now."""
        validate(source)
        rec = self._sources.setdefault((str(pod.uid), volume, index), _Source(source["signerName"]))
        try:
            await self._advance(api, pod, source, rec)
        except PodCertificateError as exc:
            if rec.state not in (FRESH, REFRESHING):
                raise
            # The certificate in the volume is still good: the refresh is tried again next time.
            log.warning("pod %s: volume %s: refreshing its pod certificate: %s", pod.full_name, volume, exc)
        if rec.state in (FRESH, REFRESHING):
            return rec.key, rec.chain
        if rec.state in (DENIED, FAILED):
            raise PodCertificateError(f"PodCertificateRequest was permanently {rec.state}: reason={_q(rec.reason)} "
                                      f"message={_q(rec.message)}")
        raise PodCertificateError("credential bundle is not issued yet")

    async def _advance(self, api: PodCertificateApi, pod: Pod, source: dict[str, Any], rec: _Source) -> None:
        now = self.clock()
        if rec.state == INITIAL:
            rec.pending = await self._request(api, pod, source)
            rec.state = WAITING
        elif rec.state == FRESH and now >= rec.begin_refresh_at:
            self._tell_overdue(pod, rec, now)
            rec.pending = await self._request(api, pod, source)
            rec.state = REFRESHING
        elif rec.state in (WAITING, REFRESHING):
            await self._look(api, pod, rec, now)

    async def _request(self, api: PodCertificateApi, pod: Pod, source: dict[str, Any]) -> _Pending:
        ns, sa = pod.metadata.namespace, pod.spec.serviceAccountName or "default"
        try:
            sa_uid, node_uid = await api.service_account_uid(ns, sa), await api.node_uid()
        except Exception as exc:
            raise PodCertificateError(f"while creating PodCertificateRequest: {exc}") from None
        key, request = await asyncio.get_running_loop().run_in_executor(_KEYGEN, new_key_and_request, source["keyType"])
        spec: dict[str, Any] = {
            "signerName": source["signerName"], "podName": pod.metadata.name, "podUID": pod.uid,
            "serviceAccountName": sa, "serviceAccountUID": sa_uid, "nodeName": api.node_name, "nodeUID": node_uid,
            "stubPKCS10Request": base64.b64encode(request).decode()}
        if source.get("maxExpirationSeconds") is not None:
            spec["maxExpirationSeconds"] = source["maxExpirationSeconds"]
        if source.get("userAnnotations"):
            spec["unverifiedUserAnnotations"] = dict(source["userAnnotations"])
        body = {"apiVersion": CERTIFICATES, "kind": "PodCertificateRequest",
                "metadata": {"namespace": ns, "generateName": "req-",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                                                  "uid": pod.uid}]},
                "spec": spec}
        try:
            made = await api.create_pod_certificate_request(ns, body)
        except Exception as exc:
            raise PodCertificateError(f"while creating PodCertificateRequest: {exc}") from None
        return _Pending(key, str(made["metadata"]["name"]), self.clock() + ASSUME_DELETED + self.jitter())

    async def _look(self, api: PodCertificateApi, pod: Pod, rec: _Source, now: float) -> None:
        """A request is pending: take its answer, if it has one."""
        assert rec.pending is not None
        ns, name = pod.metadata.namespace, rec.pending.name
        try:
            pcr = await api.pod_certificate_request(ns, name)
        except Exception as exc:
            raise PodCertificateError(f'while getting PodCertificateRequest "{ns}/{name}": {exc}') from None
        if pcr is None:
            if now > rec.pending.abandon_at:
                rec.pending = None
                rec.state = INITIAL if rec.state == WAITING else FRESH
                raise PodCertificateError(f'PodCertificateRequest "{ns}/{name}" appears to have been deleted')
            return
        status = pcr.get("status") or {}
        for cond in status.get("conditions") or []:
            kind = cond.get("type")
            if kind in ("Denied", "Failed"):
                rec.state, rec.reason, rec.message = (DENIED if kind == "Denied" else FAILED,
                                                      str(cond.get("reason", "")), str(cond.get("message", "")))
                rec.pending = None
                verb = "was denied" if kind == "Denied" else "failed"
                self.event(pod, "Warning", kind, f"PodCertificateRequest {ns}/{name} {verb}, "
                                                 f"reason={_q(rec.reason)}, message={_q(rec.message)}")
                return
            if kind == "Issued":
                rec.key, rec.chain = rec.pending.key, clean_chain(str(status.get("certificateChain", "")))
                rec.begin_refresh_at = _time(status.get("beginRefreshAt")) + self.jitter()
                rec.not_after = _time(status.get("notAfter"))
                rec.pending, rec.state, rec.told = None, FRESH, set()
                return
        if rec.state == REFRESHING:
            self._tell_overdue(pod, rec, now)

    def _tell_overdue(self, pod: Pod, rec: _Source, now: float) -> None:
        if now > rec.begin_refresh_at + REFRESH_OVERDUE and "overdue" not in rec.told:
            self.event(pod, "Warning", "CertificateOverdueForRefresh", "PodCertificate refresh overdue")
            rec.told.add("overdue")
        if now > rec.not_after and "expired" not in rec.told:
            self.event(pod, "Warning", "CertificateExpired", "PodCertificate expired")
            rec.told.add("expired")

    def forget(self, uid: str) -> None:
        for key in [k for k in self._sources if k[0] == uid]:
            del self._sources[key]

    def states(self) -> Counter[tuple[str, str]]:
        """(signer, state) -> how many sources, in the kubelet's metric's words."""
        now = self.clock()
        counts: Counter[tuple[str, str]] = Counter()
        for rec in self._sources.values():
            if rec.state in (INITIAL, WAITING):
                state = "not_yet_issued"
            elif rec.state in (DENIED, FAILED):
                state = rec.state
            elif now > rec.not_after:
                state = "expired"
            elif now > rec.begin_refresh_at + REFRESH_OVERDUE:
                state = "overdue_for_refresh"
            else:
                state = "fresh"
            counts[(rec.signer, state)] += 1
        return counts


def _q(text: str) -> str:
    """Quoted as the kubelet's %q quotes it (for what a condition holds, JSON's quoting is the same)."""
    return json.dumps(text, ensure_ascii=False)
