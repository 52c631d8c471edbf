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
import datetime as dt
import logging
import os
import ssl
from pathlib import Path

from shared.api.csr import (
    CSRAPI,
    CSRDenied,
    await_certificate,
    key_and_request,
    request_body,
    rotation_deadline,
    validity,
    wait_until,
)
from shared.tasks.retry import describe, until_done

__all__ = ["CSRAPI", "CSRDenied", "ServingCertificate", "SIGNER"]

log = logging.getLogger(__name__)

SIGNER = "kubernetes.io/kubelet-serving"
USAGES = ["digital signature", "key encipherment", "server auth"]
# How long one CSR may wait for approval and signing before a new one is made.
ISSUE_TIMEOUT = 15 * 60.0
CURRENT = "kubelet-server-current.pem"
RETRY_CAP = 30.0


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
        key_pem, csr_pem = await asyncio.to_thread(key_and_request, self.node, [self.node], self.addresses)
        name = await self.api.create(request_body(csr_pem, SIGNER, USAGES))

        def waiting(state: str) -> None:
            self.state = state
            log.info("serving certificate: %s", state)

        cert_pem = await await_certificate(self.api, name, ISSUE_TIMEOUT, waiting)
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
            await wait_until(deadline)
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
