"""Bringing up the kubelet API's listeners: the authenticated HTTPS port and, only when
configured, the unauthenticated read-only port."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import httpx
from prometheus_client import generate_latest

from services.node_api.auth import Authenticator, AuthError, Authorizer
from services.node_api.http import Gate, HTTPError, HTTPServer, Request
from services.node_api.kubelet_api import KubeletAPI, NodeMetrics
from services.node_api.metrics_merge import ScrapeError, merge_expositions, scrape_all
from services.node_api.tls import server_context, serving_cert_paths
from shared.config.settings import ConfigError
from shared.host.facts import node_address
from shared.process.admin import SERVICES, admin_port
from shared.process.listener_owner import root_listens
from shared.process.service import ServiceContext

if TYPE_CHECKING:
    from shared.api.client import KubeApi

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT = 5.0


def node_metrics_source(ctx: ServiceContext) -> NodeMetrics:
    """The node's /metrics: each service's loopback exposition, merged with node-api's own."""
    base = ctx.settings.admin_port_base
    ports = {s: admin_port(s, base) for s in SERVICES if s != "node-api"}
    targets = {s: f"http://127.0.0.1:{port}/metrics" for s, port in ports.items()}
    # Plain HTTP to loopback only: no certificate is ever checked, so no CA bundle is loaded
    # (the default loads certifi's, ~2 MiB this process would keep). The admin apps answer only
    # with the node's admin token.
    client = httpx.AsyncClient(timeout=SCRAPE_TIMEOUT, verify=False,
                               headers={"Authorization": f"Bearer {ctx.admin_token}"})
    ctx.on_shutdown(client.aclose)

    def unowned() -> dict[str, str | Exception]:
        # The token goes only to a root process's listener: a local user who bound the port of
        # a service that is down would otherwise be handed it.
        return {s: ScrapeError(f"GET {targets[s]}: not asked, the port is not held by a root process")
                for s, port in ports.items() if not root_listens(port)}

    async def gather() -> str:
        texts = await asyncio.to_thread(unowned)
        texts.update(await scrape_all({s: u for s, u in targets.items() if s not in texts}, client, SCRAPE_TIMEOUT))
        return merge_expositions(texts, own=generate_latest().decode())
    return gather


def auth_gate(authn: Authenticator, authz: Authorizer) -> Gate:
    """Every request on the authenticated port: who is asking, and may they (401/403 otherwise)."""
    async def gate(req: Request) -> None:
        try:
            req.user = await authn.authenticate(req.peercert, req.header("authorization"))
            await authz.authorize(req.user, req.method, req.path)
        except AuthError as exc:
            raise HTTPError(exc.status, str(exc)) from None
    return gate


async def _api_client(ctx: ServiceContext) -> KubeApi | None:
    if not ctx.settings.cluster_mode:
        return None
    from shared.api.client import node_api_client

    api = node_api_client(ctx.settings)
    ctx.on_shutdown(api.close)
    return api


async def _listen(server: HTTPServer, address: str, port: int, what: str) -> None:
    try:
        await server.start(address, port)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot listen on {address}:{port}: {exc.strerror}; is another "
                          f"kubelet running? Set `port`/`readOnlyPort` in the config to use another") from None


async def start_listeners(ctx: ServiceContext, kubelet: KubeletAPI) -> None:
    k = ctx.settings.kubelet
    if not k.enable_server:
        log.info("kubelet API disabled (enableServer: false)")
        return
    if k.server_tls_bootstrap and not ctx.settings.cluster_mode:
        raise ConfigError("serverTLSBootstrap: true needs an API server to sign the certificate "
                          "(--kubeconfig); in standalone mode set tlsCertFile/tlsPrivateKeyFile or "
                          "leave them unset for a self-signed certificate")
    api = await _api_client(ctx)
    reviews = None
    if api is not None:
        from services.node_api.apiserver import KubeReviews
        reviews = KubeReviews(api)
    authn = Authenticator(k.authentication, reviews)
    authz = Authorizer(k.authorization, reviews, ctx.settings.node_name)

    gate = auth_gate(authn, authz)
    cert_dir = ctx.settings.cert_dir
    if k.server_tls_bootstrap and api is not None:  # cluster mode: checked above
        from services.node_api.serving_csr import ServingCertificate
        from shared.api.csr import KubeCSRs

        tls = server_context(k, None, None)
        serving = ServingCertificate(KubeCSRs(api), tls, cert_dir, ctx.settings.node_name,
                                     [node_address(ctx.settings.node_ip)])
        ctx.spawn("serving-certificate", serving.run())
    else:
        # In a thread: a first start makes a key and certificate, importing cryptography and
        # writing files, which held node-api's loop past 100 ms under a busy disk.
        cert, key = await asyncio.to_thread(serving_cert_paths, k, cert_dir, ctx.settings.node_name,
                                            [node_address(ctx.settings.node_ip)])
        tls = server_context(k, cert, key)
        kubelet.serving_files = (str(cert), str(key))
        serving = None
    server = HTTPServer(kubelet.routes(), gate, tls, "kubelet-api")
    ctx.on_shutdown(server.stop)

    async def listen() -> None:
        if serving is not None:
            # Like the kubelet, nothing is served before there is a certificate to serve with.
            await serving.ready.wait()
        await _listen(server, k.address, k.port, "kubelet API")
        log.info("kubelet API on https://%s:%d (authentication: %s; authorization: %s)", k.address,
                 server.port, authn.describe(), k.authorization.mode)
    if serving is None:
        await listen()
    else:
        async def listen_when_issued() -> None:
            await listen()
            await ctx.stopping.wait()
        ctx.spawn("kubelet-api-listen", listen_when_issued())

    def check() -> tuple[bool, str]:
        if not server.listening:
            return False, serving.state if serving else "not listening"
        return True, f"listening on {k.address}:{server.port}" + (f"; {serving.state}" if serving else "")
    ctx.checks["kubelet-api"] = check

    if k.read_only_port:
        async def open_gate(req: Request) -> None:
            return None

        ro = HTTPServer(kubelet.routes(read_only=True), open_gate, None, "kubelet-read-only")
        await _listen(ro, k.address, k.read_only_port, "read-only port")
        ctx.on_shutdown(ro.stop)
        log.warning("read-only kubelet API on http://%s:%d: unauthenticated (readOnlyPort)", k.address,
                    k.read_only_port)
