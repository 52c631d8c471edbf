"""serverTLSBootstrap: the kubelet API's serving certificate comes from the cluster, through a
`kubernetes.io/kubelet-serving` CertificateSigningRequest, and is renewed before it expires
(at a random point between 70% and 90% of its lifetime, as the kubelet's certificate manager does).

The request names the node (`system:node:<name>`, group `system:nodes`) and its addresses; a
signer (kube-controller-manager with cluster signing, or an external one) issues it once the
CSR is approved (`kubectl certificate approve`). Key and certificate are kept in the cert dir
(0600) so a restart serves the current certificate at once.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import logging
import os
import random
import ssl
from pathlib import Path
from typing import Any, Protocol

from shared.retry import describe, until_done

log = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kubelet-serving"
USAGES = ["digital signature", "key encipherment", "server auth"]
POLL = 2.0
# How long one CSR may wait for approval and signing before a new one is made.
ISSUE_TIMEOUT = 15 * 60.0
CURRENT = "kubelet-server-current.pem"
RETRY_CAP = 30.0


class CSRAPI(Protocol):
    async def create(self, body: dict[str, Any]) -> str: ...          # -> the CSR's name
    async def get(self, name: str) -> dict[str, Any]: ...             # the CSR as a dict


class CSRDenied(RuntimeError):
    pass


def build_request(node: str, addresses: list[str]) -> tuple[bytes, bytes]:
    """(key PEM, CSR PEM) for the node's serving certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(node)]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                    x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]))
           .add_extension(x509.SubjectAlternativeName(sans), critical=False)
           .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, csr.public_bytes(serialization.Encoding.PEM)


def validity(pem: bytes) -> tuple[dt.datetime, dt.datetime]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem)
    return cert.not_valid_before_utc, cert.not_valid_after_utc


def rotation_deadline(pem: bytes, rng: random.Random | None = None) -> dt.datetime:
    start, end = validity(pem)
    fraction = 0.7 + 0.2 * (rng or random).random()
    return start + (end - start) * fraction


class ServingCertificate:
    """Keeps a valid cluster-issued serving certificate loaded in `context`."""

    def __init__(self, api: CSRAPI, context: ssl.SSLContext, cert_dir: Path, node: str,
                 addresses: list[str]) -> None:
        self.api = api
        self.context = context
        self.path = cert_dir / CURRENT
        self.node = node
        self.addresses = addresses
        self.state = "no serving certificate yet"
        self.ready = asyncio.Event()

    def load_existing(self) -> bool:
        """Serve the certificate kept from an earlier run, if it is still valid."""
        try:
            pem = self.path.read_bytes()
            start, end = validity(pem)
        except (OSError, ValueError):
            return False
        now = dt.datetime.now(dt.timezone.utc)
        if not start <= now < end:
            return False
        self._load()
        return True

    def _load(self) -> None:
        self.context.load_cert_chain(str(self.path))
        _, end = validity(self.path.read_bytes())
        self.state = f"serving certificate from the cluster, valid until {end:%Y-%m-%dT%H:%M:%SZ}"
        self.ready.set()

    async def obtain(self) -> None:
        """One CSR, waited for until issued; then the certificate is stored and served."""
        key_pem, csr_pem = await asyncio.to_thread(build_request, self.node, self.addresses)
        body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"generateName": "csr-"},
                "spec": {"request": base64.b64encode(csr_pem).decode(), "signerName": SIGNER,
                         "usages": USAGES}}
        name = await self.api.create(body)
        self.state = f"waiting for CSR {name} to be approved and signed (kubectl certificate approve {name})"
        log.info("serving certificate: %s", self.state)
        deadline = asyncio.get_running_loop().time() + ISSUE_TIMEOUT
        while True:
            csr = await self.api.get(name)
            status = csr.get("status") or {}
            for cond in status.get("conditions") or []:
                if cond.get("type") in ("Denied", "Failed") and cond.get("status", "True") == "True":
                    raise CSRDenied(f"CSR {name} {cond['type'].lower()}: {cond.get('message') or cond.get('reason')}")
            if status.get("certificate"):
                cert_pem = base64.b64decode(status["certificate"])
                break
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"CSR {name} was not issued within {ISSUE_TIMEOUT:.0f}s")
            await asyncio.sleep(POLL)
        self._store(key_pem, cert_pem)
        self._load()
        log.info("serving certificate: CSR %s issued; %s", name, self.state)

    def _store(self, key_pem: bytes, cert_pem: bytes) -> None:
        """Key and chain in one file, replaced atomically, never readable by others."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(f".{CURRENT}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(cert_pem + key_pem)
        os.replace(tmp, self.path)

    async def run(self) -> None:
        """Obtain a certificate if none is valid, then renew each at its rotation deadline."""
        if not self.load_existing():
            await self._obtain_with_retry()
        while True:
            deadline = rotation_deadline(self.path.read_bytes())
            wait = (deadline - dt.datetime.now(dt.timezone.utc)).total_seconds()
            if wait > 0:
                await asyncio.sleep(wait)
            log.info("serving certificate: rotating (deadline %s)", f"{deadline:%Y-%m-%dT%H:%M:%SZ}")
            await self._obtain_with_retry()

    async def _obtain_with_retry(self) -> None:
        """A denied or unanswered CSR, or an unreachable API server, is retried with back-off
        (a new CSR each time), for as long as it takes; the readiness check shows why. The cap
        is short: a certificate due for renewal may expire while the API server is away, and
        must be renewed soon after it is back."""
        async def attempt() -> None:
            try:
                await self.obtain()
            except Exception as exc:
                self.state = f"no serving certificate: {describe(exc)}"
                raise

        await until_done("getting a serving certificate", attempt, log, initial=2.0, cap=RETRY_CAP)
