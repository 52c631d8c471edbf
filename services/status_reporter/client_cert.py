"""The node's client certificate, as the kubelet gets and keeps it.

- **TLS bootstrap** (`--bootstrap-kubeconfig`): while `--kubeconfig` is missing, or its client
  certificate has expired, a `kubernetes.io/kube-apiserver-client-kubelet` CSR for
  system:node:NAME is made with the bootstrap credentials (a bootstrap token, as `kubeadm join`
  writes them); once approved and signed, the pair goes to the cert dir (shared/api/client_cert.py)
  and the kubeconfig that names it is written. Every other service waits for that kubeconfig.
- **Rotation** (`rotateCertificates: true`): the pair is renewed at a random point between 70%
  and 90% of its lifetime, with a CSR made on the node's own credentials; each service's API
  client takes the new pair for new connections.

The status-reporter does both: it is the node's one writer of its own API objects.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Awaitable, Callable

import httpx

from shared.api import client_cert
from shared.api.client import ApiError, KubeApi, api_client
from shared.api.csr import (
    CSRDenied,
    KubeCSRs,
    await_certificate,
    check_issued,
    currently_valid,
    digested_name,
    key_and_request,
    request_body,
    rotation_deadline,
    wait_until,
)
from shared.api.kubeconfig import client_certificate
from shared.config.settings import ConfigError, NodeSettings
from shared.tasks.retry import describe, until_done

log = logging.getLogger(__name__)

# How long one bootstrap request waits for approval and signing, as long as the kubelet waits.
BOOTSTRAP_TIMEOUT = 3600.0
# A renewal's request: a new one after this long without a certificate.
RENEWAL_TIMEOUT = 15 * 60.0
RETRY_CAP = 30.0
# What a new attempt may get past: the API server away or refusing, a request denied or left
# unanswered. A kubeconfig that cannot be used stops the service, naming the file (the
# supervisor or systemd starts it again, and the log says what to fix).
TRANSIENT = (ApiError, httpx.HTTPError, OSError, CSRDenied, TimeoutError)


class ClientCertificate:
    def __init__(self, settings: NodeSettings) -> None:
        assert settings.kubeconfig is not None, "cluster mode only"
        self.kubeconfig: Path = settings.kubeconfig
        self.bootstrap_kubeconfig = settings.bootstrap_kubeconfig
        self.cert_dir = settings.cert_dir
        self.node = settings.node_name
        k = settings.kubelet
        self.qps, self.burst, self.root_dir = k.kube_api_qps, k.kube_api_burst, settings.root_dir
        self.rotate_certificates = k.rotate_certificates
        self.state = ""  # what the certificate waits for, shown while the node is not registered

    @property
    def wanted(self) -> bool:
        return self.bootstrap_kubeconfig is not None or self.rotate_certificates

    async def run(self, api: KubeApi) -> None:
        """The TLS bootstrap if the kubeconfig needs one (every API request of the node waits
        for its kubeconfig meanwhile: shared/api/client.py), then, with rotateCertificates, renewals
        for as long as the node runs."""
        if self.bootstrap_kubeconfig is not None:
            await self.bootstrap()
        if self.rotate_certificates:
            await self.rotate(api)

    # --- TLS bootstrap -----------------------------------------------------------------------

    async def bootstrap(self) -> None:
        """Returns once the kubeconfig can be used; bootstraps first if it cannot (and a
        bootstrap kubeconfig is given). Retried until it works: the reason is logged."""
        usable, why = client_cert.kubeconfig_usable(self.kubeconfig)
        if usable:
            return
        if self.bootstrap_kubeconfig is None:
            raise ConfigError(f"cannot use --kubeconfig: {why}; give --bootstrap-kubeconfig to have the node "
                              "request a new client certificate")
        log.info("TLS bootstrap: %s; requesting a client certificate for %s with %s", why,
                 f"system:node:{self.node}", self.bootstrap_kubeconfig)
        self.state = f"TLS bootstrap: {why}"
        await self._retried("TLS bootstrap", "TLS bootstrap failed, retrying", self._bootstrap_once)

    async def _retried(self, what: str, failed: str, step: Callable[[], Awaitable[None]]) -> None:
        """step, again with back-off until it works; meanwhile the readiness check shows why not."""
        async def attempt() -> None:
            try:
                await step()
            except Exception as exc:
                self.state = f"{failed}: {describe(exc)}"
                raise

        await until_done(what, attempt, log, initial=2.0, cap=RETRY_CAP, retry_on=TRANSIENT)
        self.state = ""

    async def _with_bootstrap_credentials(self, step: Callable[[KubeApi], Awaitable[None]]) -> None:
        assert self.bootstrap_kubeconfig is not None
        api = await api_client(self.bootstrap_kubeconfig, self.qps, self.burst, self.root_dir)
        try:
            await step(api)
        finally:
            await api.close()

    async def _bootstrap_once(self) -> None:
        assert self.bootstrap_kubeconfig is not None
        current = client_cert.current_pem(self.cert_dir)
        if current is None or not currently_valid(current):
            await self._with_bootstrap_credentials(self._request_bootstrap_certificate)
        else:
            log.info("TLS bootstrap: the cert dir's %s is valid: writing the kubeconfig for it", client_cert.CURRENT)
        client_cert.write_kubeconfig(self.kubeconfig, self.bootstrap_kubeconfig, self.cert_dir)
        log.info("TLS bootstrap: wrote %s (client certificate %s)", self.kubeconfig,
                 client_cert.current_path(self.cert_dir))

    async def _request_bootstrap_certificate(self, api: KubeApi) -> None:
        # The pending key outlives a restart, and with it the CSR's name: the same request is
        # found again and waited for, instead of a second one an approver would see.
        pending = client_cert.pending_key(self.cert_dir)
        try:
            key_pem, csr_pem = await asyncio.to_thread(key_and_request, self.node, key_pem=pending)
        except ValueError as exc:
            log.warning("TLS bootstrap: the pending key cannot be used (%s): making a new one", exc)
            key_pem, csr_pem = await asyncio.to_thread(key_and_request, self.node)
        client_cert.keep_pending_key(self.cert_dir, key_pem)
        csrs = KubeCSRs(api)
        name = await csrs.create(request_body(csr_pem, client_cert.SIGNER, client_cert.USAGES,
                                              digested_name(key_pem, self.node, client_cert.USAGES)))
        try:
            cert_pem = await await_certificate(csrs, name, BOOTSTRAP_TIMEOUT, self._waiting)
            check_issued(cert_pem, key_pem, name)
        except (CSRDenied, TimeoutError):
            client_cert.drop_pending_key(self.cert_dir)  # the next attempt is a new request
            raise
        client_cert.store(self.cert_dir, cert_pem, key_pem)
        client_cert.drop_pending_key(self.cert_dir)
        log.info("TLS bootstrap: CSR %s issued", name)

    def _waiting(self, state: str) -> None:
        self.state = f"client certificate: {state}"
        log.info(self.state)

    # --- rotation ----------------------------------------------------------------------------

    def _current(self) -> bytes | None:
        """The pair in use: the cert dir's once there is one, else the kubeconfig's own."""
        pem = client_cert.current_pem(self.cert_dir)
        if pem is not None:
            return pem
        try:
            return client_certificate(self.kubeconfig)
        except (ConfigError, OSError):
            return None

    async def rotate(self, api: KubeApi) -> None:
        """Renew the client certificate at each rotation deadline, for as long as the node runs."""
        while True:
            pem = self._current()
            if pem is None:
                log.warning("rotateCertificates: %s has no client certificate to renew (it authenticates "
                            "otherwise); nothing is rotated", self.kubeconfig)
                return
            deadline = rotation_deadline(pem)
            log.info("client certificate: next renewal at %s", f"{deadline:%Y-%m-%dT%H:%M:%SZ}")
            await wait_until(deadline)
            await self._retried("renewing the client certificate", "client certificate not renewed",
                                lambda: self._renew(api))

    async def _renew(self, api: KubeApi) -> None:
        current = self._current()
        if current is not None and not currently_valid(current) and self.bootstrap_kubeconfig is not None:
            # Expired (the node was down past its end): the bootstrap credentials ask, as the
            # kubelet's certificate manager falls back to them.
            log.warning("client certificate expired: renewing it with %s", self.bootstrap_kubeconfig)
            await self._with_bootstrap_credentials(self._request)
        else:
            await self._request(api)

    async def _request(self, api: KubeApi) -> None:
        key_pem, csr_pem = await asyncio.to_thread(key_and_request, self.node)
        csrs = KubeCSRs(api)
        name = await csrs.create(request_body(csr_pem, client_cert.SIGNER, client_cert.USAGES))
        cert_pem = await await_certificate(csrs, name, RENEWAL_TIMEOUT, self._waiting)
        check_issued(cert_pem, key_pem, name)
        pair = client_cert.store(self.cert_dir, cert_pem, key_pem)
        log.info("client certificate: CSR %s issued, now %s", name, pair.name)


