"""tlsMinVersion, tlsCipherSuites, tlsCertFile and tlsPrivateKeyFile on the kubelet API's real
TLS listener (services/node_api/tls.py): what a client can and cannot negotiate, and the
certificate it is shown."""

from __future__ import annotations

import asyncio
import re
import ssl

import pytest

from services.node_api.http import HTTPServer, Request, Response, Router, text_response
from services.node_api.tls import server_context, serving_cert_paths
from shared.config.settings import KubeletConfiguration
from tests.cluster.pki import PKI


async def serve(tmp_path, config: dict) -> HTTPServer:
    cfg = KubeletConfiguration.model_validate({"authentication": {"anonymous": {"enabled": True}},
                                               "authorization": {"mode": "AlwaysAllow"}, **config})
    router = Router()

    async def healthz(_req: Request) -> Response:
        return text_response("ok")
    router.add("GET", "/healthz", healthz)
    cert, key = serving_cert_paths(cfg, tmp_path / "certs", "node1", ["127.0.0.1"])
    srv = HTTPServer(router, None, server_context(cfg, cert, key), "test")
    await srv.start("127.0.0.1", 0)
    return srv


async def handshake(port: int, *, max_version=None, ciphers: str | None = None,
                    curve: str | None = None) -> ssl.SSLObject:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if max_version is not None:
        ctx.maximum_version = max_version
    if ciphers is not None:
        ctx.set_ciphers(ciphers)
    if curve is not None:  # the client offers this key exchange group only
        ctx.set_ecdh_curve(curve)
    _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), 10)
    tls = writer.get_extra_info("ssl_object")
    writer.close()
    return tls


async def test_tls_min_version_refuses_an_older_client(tmp_path):
    srv = await serve(tmp_path, {"tlsMinVersion": "VersionTLS13"})
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):  # refused in the handshake
            await handshake(srv.port, max_version=ssl.TLSVersion.TLSv1_2)
        assert (await handshake(srv.port)).version() == "TLSv1.3"
    finally:
        await srv.stop()


async def test_tls_cipher_suites_are_the_only_tls12_suites_offered(tmp_path):
    srv = await serve(tmp_path, {"tlsCipherSuites": ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]})
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):  # refused in the handshake
            await handshake(srv.port, max_version=ssl.TLSVersion.TLSv1_2, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256")
        tls = await handshake(srv.port, max_version=ssl.TLSVersion.TLSv1_2)
        assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    finally:
        await srv.stop()


async def test_tls_curve_preferences_is_the_only_key_exchange_group_agreed(tmp_path):
    """tlsCurvePreferences [24] (Go's CurveP384): a client offering only P-256 or only X25519 is
    refused, in TLS 1.3 and 1.2; in TLS 1.3 one offering only P-384 gets through, and so does one
    with OpenSSL's default list in both (in TLS 1.2 the list must also hold the P-256 of the
    node's ECDSA certificate, as with Go's TLS)."""
    srv = await serve(tmp_path, {"tlsCurvePreferences": [24]})
    try:
        for version in (None, ssl.TLSVersion.TLSv1_2):
            for curve in ("prime256v1", "X25519"):
                with pytest.raises((ssl.SSLError, ConnectionError)):
                    await handshake(srv.port, max_version=version, curve=curve)
            assert await handshake(srv.port, max_version=version)
        assert (await handshake(srv.port, curve="secp384r1")).version() == "TLSv1.3"
    finally:
        await srv.stop()


@pytest.mark.parametrize("curves,error", [
    ([23, 24], "one curve, not a preference list of 2"), ([22], "unknown curve ID(s) 22"),
    ([4588], "4588 (X25519MLKEM768) is not offered"),
])
def test_tls_curve_preferences_it_cannot_honour_are_refused(curves, error):
    with pytest.raises(ValueError, match=re.escape(error)):
        KubeletConfiguration.model_validate({"tlsCurvePreferences": curves})


async def test_tls_cert_and_key_files_are_the_certificate_clients_see(tmp_path):
    from cryptography import x509

    pair = PKI(tmp_path / "pki").issue("serving", "kubelet-of-node1", server=True)
    srv = await serve(tmp_path, {"tlsCertFile": str(pair.cert), "tlsPrivateKeyFile": str(pair.key)})
    try:
        der = (await handshake(srv.port)).getpeercert(binary_form=True)
        assert x509.load_der_x509_certificate(der).subject.rfc4514_string() == "CN=kubelet-of-node1"
        assert not (tmp_path / "certs" / "kubelet.crt").exists(), "no self-signed one was made"
    finally:
        await srv.stop()
