"""Certificates from the cluster through CertificateSigningRequests, as the kubelet's certificate
manager gets them: a key made here, a CSR for it, and the certificate once a signer has issued
it; renewal at a random point between 70% and 90% of a certificate's lifetime.

Two users: the node API's serving certificate (serverTLSBootstrap, signer
kubernetes.io/kubelet-serving) and the node's client certificate (TLS bootstrap and
rotateCertificates, signer kubernetes.io/kube-apiserver-client-kubelet).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import hashlib
import ipaddress
import logging
import random
from typing import Any, Callable, Protocol

import httpx

from shared.api.client import ApiError, KubeApi, path

log = logging.getLogger(__name__)

# Between looks at a CSR when its watch is not available (the kubelet watches; so do we).
POLL = 2.0
# One watch of a CSR lasts at most this long before it is looked at again.
WATCH_MAX = 60.0
NODES_GROUP = "system:nodes"


class CSRAPI(Protocol):
    async def create(self, body: dict[str, Any]) -> str: ...          # -> the CSR's name
    async def get(self, name: str) -> dict[str, Any]: ...             # the CSR as a dict

    async def wait_for_change(self, name: str, resource_version: str, timeout: float) -> None:
        """Return once the CSR may have changed since resource_version, or after timeout."""


class CSRDenied(RuntimeError):
    pass


class UnusableCertificate(CSRDenied):
    """What the signer issued cannot be used with the request's key: a new request is made."""


def node_subject(node: str) -> str:
    return f"system:node:{node}"


def key_and_request(node: str, dns: list[str] = (), ips: list[str] = (),  # type: ignore[assignment]
                    key_pem: bytes | None = None) -> tuple[bytes, bytes]:
    """(key PEM, CSR PEM) for CN system:node:NAME, O system:nodes; a new P-256 key unless
    key_pem is given (the kubelet keeps the key of a pending bootstrap request across restarts)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    if key_pem is None:
        key = ec.generate_private_key(ec.SECP256R1())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    else:
        loaded = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError("the pending request's key is not an EC key")
        key = loaded
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
                   x509.NameAttribute(NameOID.COMMON_NAME, node_subject(node))]))
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key_pem, builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def request_body(csr_pem: bytes, signer: str, usages: list[str], name: str = "") -> dict[str, Any]:
    meta = {"name": name} if name else {"generateName": "csr-"}
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": meta,
            "spec": {"request": base64.b64encode(csr_pem).decode(), "signerName": signer, "usages": usages}}


def _raw_url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def digested_name(key_pem: bytes, node: str, usages: list[str]) -> str:
    """A name that only this key, subject and usages give, as the kubelet's bootstrap names its
    request (node-csr-, SHA-512/256 of the public key, CN, O and usages): a restart during a
    bootstrap finds its own request again instead of making another."""
    from cryptography.hazmat.primitives import serialization

    public = serialization.load_pem_private_key(key_pem, password=None).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    h = hashlib.new("sha512_256")
    for part in (public, node_subject(node).encode(), NODES_GROUP.encode(), *[u.encode() for u in usages]):
        h.update(_raw_url(part).encode() + b"|")
    return "node-csr-" + _raw_url(h.digest())


def validity(pem: bytes) -> tuple[dt.datetime, dt.datetime]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem)
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def check_issued(cert_pem: bytes, key_pem: bytes, name: str) -> None:
    """The certificate CSR `name` was issued is one PEM certificate for key_pem's public key,
    valid now; UnusableCertificate says what it is not (the API server's answer is not trusted
    to be what was asked for before it becomes the node's credentials)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise UnusableCertificate(f"CSR {name} was issued something that is not a PEM certificate: {exc}") from None
    public = serialization.load_pem_private_key(key_pem, password=None).public_key()
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*spki) != public.public_bytes(*spki):
        raise UnusableCertificate(f"CSR {name} was issued a certificate for another key")
    if not currently_valid(cert_pem):
        raise UnusableCertificate(f"CSR {name} was issued a certificate valid only from "
                                  f"{cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} to "
                                  f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}; is this host's clock right?")


def currently_valid(pem: bytes) -> bool:
    try:
        start, end = validity(pem)
    except ValueError:
        return False
    return start <= dt.datetime.now(dt.timezone.utc) < end


def rotation_deadline(pem: bytes, rng: random.Random | None = None) -> dt.datetime:
    start, end = validity(pem)
    fraction = 0.7 + 0.2 * (rng or random).random()
    return start + (end - start) * fraction


async def wait_until(deadline: dt.datetime) -> None:
    wait = (deadline - dt.datetime.now(dt.timezone.utc)).total_seconds()
    if wait > 0:
        await asyncio.sleep(wait)


async def await_certificate(api: CSRAPI, name: str, timeout: float,
                            on_wait: Callable[[str], None] | None = None) -> bytes:
    """The certificate (PEM) the signer issues for CSR `name`; CSRDenied when it is denied or
    fails, TimeoutError when nothing is issued within timeout seconds."""
    if on_wait is not None:
        on_wait(f"waiting for CSR {name} to be approved and signed (kubectl certificate approve {name})")
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        csr = await api.get(name)
        status = csr.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Denied", "Failed") and cond.get("status", "True") == "True":
                raise CSRDenied(f"CSR {name} {cond['type'].lower()}: {cond.get('message') or cond.get('reason')}")
        if status.get("certificate"):
            return base64.b64decode(status["certificate"])
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise TimeoutError(f"CSR {name} was not issued within {timeout:.0f}s")
        meta = csr.get("metadata") or {}
        await api.wait_for_change(name, str(meta.get("resourceVersion", "")), min(left, WATCH_MAX))


class KubeCSRs:
    """CSRAPI on the API server. A named request that exists already is the one a restart left
    pending (its name is digested from its key): it is used, not made again."""

    GROUP_VERSION = "certificates.k8s.io/v1"

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    async def create(self, body: dict[str, Any]) -> str:
        try:
            csr = await self.api.create(path(self.GROUP_VERSION, "certificatesigningrequests"), body)
        except ApiError as exc:
            name = body["metadata"].get("name")
            if exc.status != 409 or not name:
                raise
            csr = await self.get(name)
            if csr.get("spec", {}).get("request") != body["spec"]["request"]:
                raise CSRDenied(f"CSR {name} exists with another request; delete it "
                                f"(kubectl delete csr {name})") from None
        return str(csr["metadata"]["name"])

    async def get(self, name: str) -> dict[str, Any]:
        return await self.api.get(path(self.GROUP_VERSION, "certificatesigningrequests", name))

    async def wait_for_change(self, name: str, resource_version: str, timeout: float) -> None:
        """A watch of this one CSR (as the kubelet's WaitForCertificate), so an approval is seen
        at once rather than at the next poll; a look every POLL seconds where it cannot watch."""
        try:
            await asyncio.wait_for(self._next_event(name, resource_version, timeout), timeout + POLL)
        except asyncio.TimeoutError:
            return
        except (ApiError, httpx.HTTPError, ValueError) as exc:
            log.debug("cannot watch CSR %s (%s); looking again in %.0fs", name, exc, POLL)
            await asyncio.sleep(min(POLL, timeout))

    async def _next_event(self, name: str, resource_version: str, timeout: float) -> None:
        events = self.api.watch(path(self.GROUP_VERSION, "certificatesigningrequests"), resource_version,
                                max(1, int(timeout)), fieldSelector=f"metadata.name={name}")
        async with contextlib.aclosing(events):  # the stream closed at once, not when collected
            async for kind, _ in events:
                if kind != "BOOKMARK":
                    return
