"""The kubelet API's TLS as the node's configuration sets it (tests/security/conftest.py):
the certificate of tlsCertFile and tlsPrivateKeyFile, and nothing older than tlsMinVersion
(VersionTLS13)."""

from __future__ import annotations

import socket
import ssl

import pytest
from cryptography import x509

from tests.security.conftest import SecureNode, kubelet_api


def handshake(sn: SecureNode, ctx: ssl.SSLContext) -> tuple[str, bytes]:
    """TLS with the node's kubelet API port: (the version agreed, the node's certificate, DER)."""
    with socket.create_connection(("127.0.0.1", sn.node.kubelet_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.version() or "", tls.getpeercert(binary_form=True) or b""


def test_the_kubelet_api_shows_the_tls_cert_file_and_speaks_tls13_only(secure_node: SecureNode):
    ctx = ssl.create_default_context(cafile=str(secure_node.ca))
    ctx.load_cert_chain(str(secure_node.client.cert), str(secure_node.client.key))
    version, der = handshake(secure_node, ctx)
    assert version == "TLSv1.3"
    shown = x509.load_der_x509_certificate(der)
    assert shown == x509.load_pem_x509_certificate(secure_node.serving.cert.read_bytes()), shown.subject
    status, body, _ = kubelet_api(secure_node, "/pods")
    assert status == 200, body[:300]
    # The same client going no higher than TLS 1.2 is refused in the handshake.
    old = ssl.create_default_context(cafile=str(secure_node.ca))
    old.load_cert_chain(str(secure_node.client.cert), str(secure_node.client.key))
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake(secure_node, old)
