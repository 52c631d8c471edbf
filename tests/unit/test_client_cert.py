"""The node's client certificate files, the kubeconfig a TLS bootstrap writes, the CSR names a
restart finds again, and API clients that take up a renewed certificate."""

from __future__ import annotations

import argparse
import stat

import httpx
import pytest
import yaml
from cryptography import x509

from shared.api import client_cert, csr
from shared.api.client import KubeApi, RenewedCertificate
from shared.api.kubeconfig import load as load_kubeconfig
from shared.config.settings import ConfigError, add_node_flags, settings_from_args
from tests.cluster.pki import PKI


def _issue(pki: PKI, seconds: float = 3600, node: str = "node1") -> tuple[bytes, bytes]:
    key_pem, csr_pem = csr.key_and_request(node)
    return pki.sign_csr(csr_pem, seconds, server=False), key_pem


def _bootstrap_kubeconfig(tmp_path, pki: PKI):
    path = tmp_path / "bootstrap-kubelet.conf"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "b",
        "clusters": [{"name": "k", "cluster": {"server": "https://192.0.2.1:6443", "certificate-authority": "ca.crt"}}],
        "contexts": [{"name": "b", "context": {"cluster": "k", "user": "t"}}],
        "users": [{"name": "t", "user": {"token": "abcdef.0123456789abcdef"}}]}))
    (tmp_path / "ca.crt").write_bytes(pki.ca.cert.read_bytes())
    return path


def test_an_issued_pair_is_private_and_the_current_link_follows_the_newest(tmp_path):
    pki, certs = PKI(tmp_path / "ca"), tmp_path / "pki"
    cert1, key1 = _issue(pki)
    first = client_cert.store(certs, cert1, key1)
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert first.name.startswith("kubelet-client-") and first.read_bytes() == cert1 + key1
    assert client_cert.current_path(certs).resolve() == first
    cert2, key2 = _issue(pki)
    second = client_cert.store(certs, cert2, key2)
    assert second != first and first.exists()  # the old pair stays, as the kubelet keeps it
    assert client_cert.current_pem(certs) == cert2 + key2
    assert sorted(p.name for p in certs.iterdir() if p.is_symlink()) == [client_cert.CURRENT]


def test_the_bootstrap_kubeconfig_names_the_current_pair_and_the_bootstrap_cluster(tmp_path):
    pki, certs = PKI(tmp_path / "ca"), tmp_path / "pki"
    bootstrap = _bootstrap_kubeconfig(tmp_path, pki)
    kubeconfig = tmp_path / "etc" / "kubelet.conf"
    assert client_cert.kubeconfig_usable(kubeconfig) == (False, f"{kubeconfig} does not exist yet")
    client_cert.store(certs, *_issue(pki))
    client_cert.write_kubeconfig(kubeconfig, bootstrap, certs)
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    doc = yaml.safe_load(kubeconfig.read_text())
    assert doc["clusters"] == [{"name": "default-cluster", "cluster": {
        "server": "https://192.0.2.1:6443", "certificate-authority": str(tmp_path / "ca.crt")}}]
    assert doc["users"][0]["user"] == {"client-certificate": str(certs / client_cert.CURRENT),
                                       "client-key": str(certs / client_cert.CURRENT)}
    assert load_kubeconfig(kubeconfig).server == "https://192.0.2.1:6443"
    assert client_cert.kubeconfig_usable(kubeconfig) == (True, "ok")


def test_an_expired_client_certificate_makes_the_kubeconfig_unusable(tmp_path):
    pki, certs = PKI(tmp_path / "ca"), tmp_path / "pki"
    client_cert.store(certs, *_issue(pki, seconds=-1))
    kubeconfig = tmp_path / "kubelet.conf"
    client_cert.write_kubeconfig(kubeconfig, _bootstrap_kubeconfig(tmp_path, pki), certs)
    usable, why = client_cert.kubeconfig_usable(kubeconfig)
    assert not usable and "expired or not yet valid" in why


def test_a_pending_request_keeps_its_name_across_a_restart():
    key_pem, csr_pem = csr.key_and_request("node1")
    name = csr.digested_name(key_pem, "node1", client_cert.USAGES)
    again_key, again_csr = csr.key_and_request("node1", key_pem=key_pem)
    assert again_key == key_pem
    assert csr.digested_name(again_key, "node1", client_cert.USAGES) == name
    assert name.startswith("node-csr-") and len(name) == len("node-csr-") + 43
    other_key, _ = csr.key_and_request("node1")
    assert csr.digested_name(other_key, "node1", client_cert.USAGES) != name
    assert csr.digested_name(key_pem, "node2", client_cert.USAGES) != name
    # What the kube-apiserver-client-kubelet signer accepts: the node's subject, no SANs.
    req = x509.load_pem_x509_csr(again_csr)
    assert req.subject.rfc4514_string() == "CN=system:node:node1,O=system:nodes"
    with pytest.raises(x509.ExtensionNotFound):
        req.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_an_issued_certificate_must_be_for_the_requests_key_and_valid_now(tmp_path):
    pki = PKI(tmp_path / "ca")
    cert, key = _issue(pki)
    csr.check_issued(cert, key, "node-csr-a")
    other_cert, _ = _issue(pki)
    with pytest.raises(csr.UnusableCertificate, match="node-csr-a was issued a certificate for another key"):
        csr.check_issued(other_cert, key, "node-csr-a")
    expired, expired_key = _issue(pki, seconds=-1)
    with pytest.raises(csr.UnusableCertificate, match="is this host's clock right"):
        csr.check_issued(expired, expired_key, "node-csr-a")
    with pytest.raises(csr.UnusableCertificate, match="not a PEM certificate"):
        csr.check_issued(b"<html>hello</html>", key, "node-csr-a")
    # A new request follows: the bootstrap and the renewal retry a denied one.
    assert issubclass(csr.UnusableCertificate, csr.CSRDenied)


async def test_requests_after_a_renewal_go_out_on_a_new_client_and_running_ones_finish(tmp_path, monkeypatch):
    monkeypatch.setattr(RenewedCertificate, "CHECK_EVERY", 0.0)
    pki, certs = PKI(tmp_path / "ca"), tmp_path / "pki"
    client_cert.store(certs, *_issue(pki))
    made: list[int] = []

    def make_http() -> httpx.AsyncClient:
        n = len(made)
        made.append(n)
        return httpx.AsyncClient(base_url="https://api.test", transport=httpx.MockTransport(
            lambda req: httpx.Response(200, json={"client": n})))

    api = KubeApi(make_http(), None, RenewedCertificate(client_cert.current_path(certs)), make_http)
    assert await api.get("/api") == {"client": 0}
    assert await api.get("/api") == {"client": 0}
    client_cert.store(certs, *_issue(pki))
    assert await api.get("/api") == {"client": 1}
    [old] = api._retiring.values()  # closed once the watches begun on it have ended
    assert not old.is_closed
    await api.close()
    assert old.is_closed


def _parse(argv):
    p = argparse.ArgumentParser()
    add_node_flags(p)
    return settings_from_args(p.parse_args(argv))


def test_a_missing_kubeconfig_is_written_by_the_bootstrap_or_is_an_error(tmp_path):
    missing = tmp_path / "kubelet.conf"
    with pytest.raises(ConfigError, match="no such file .*--bootstrap-kubeconfig"):
        _parse(["--kubeconfig", str(missing)])
    with pytest.raises(ConfigError, match="--bootstrap-kubeconfig needs --kubeconfig"):
        _parse(["--bootstrap-kubeconfig", str(tmp_path / "b.conf")])
    with pytest.raises(ConfigError, match="does not exist and --bootstrap-kubeconfig .*: no such file"):
        _parse(["--kubeconfig", str(missing), "--bootstrap-kubeconfig", str(tmp_path / "b.conf")])
    bootstrap = _bootstrap_kubeconfig(tmp_path, PKI(tmp_path / "ca"))
    s = _parse(["--kubeconfig", str(missing), "--bootstrap-kubeconfig", str(bootstrap)])
    assert s.cluster_mode and s.kubeconfig == missing and s.bootstrap_kubeconfig == bootstrap
