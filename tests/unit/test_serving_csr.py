"""serverTLSBootstrap's certificate manager against a fake CSR API and the test CA as signer."""

from __future__ import annotations

import base64
import datetime as dt
import random
import ssl

import pytest

from services.node_api.serving_csr import SIGNER, CSRDenied, ServingCertificate
from shared.api.csr import WATCH_MAX, key_and_request, rotation_deadline, validity
from tests.cluster.pki import PKI


class FakeCSRs:
    """Issues each CSR on the second look, unless told to deny."""

    def __init__(self, pki: PKI, deny: bool = False) -> None:
        self.pki = pki
        self.deny = deny
        self.created: list[dict] = []
        self.looks = 0
        self.waits: list[float] = []

    async def create(self, body):
        self.created.append(body)
        return f"csr-{len(self.created)}"

    async def get(self, name):
        self.looks += 1
        body = self.created[int(name.split("-")[1]) - 1]
        if self.deny:
            return {**body, "status": {"conditions": [{"type": "Denied", "status": "True", "message": "no"}]}}
        if self.looks < 2:
            return {**body, "status": {}}
        pem = self.pki.sign_csr(base64.b64decode(body["spec"]["request"]), 3600)
        return {**body, "status": {"certificate": base64.b64encode(pem).decode()}}

    async def wait_for_change(self, name, resource_version, timeout):
        self.waits.append(timeout)


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch):
    monkeypatch.setattr("shared.api.csr.POLL", 0.01)


async def test_csr_is_issued_stored_and_served(tmp_path):
    pki = PKI(tmp_path / "ca")
    api = FakeCSRs(pki)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert = ServingCertificate(api, ctx, tmp_path / "pki", "node1", ["192.0.2.2"])
    assert not cert.load_existing()
    await cert.obtain()
    [body] = api.created
    assert body["spec"]["signerName"] == SIGNER
    assert body["spec"]["usages"] == ["digital signature", "key encipherment", "server auth"]
    assert cert.ready.is_set() and "valid until" in cert.state
    assert api.waits and all(0 < w <= WATCH_MAX for w in api.waits), "waited for a change, bounded, between looks"
    assert cert.path.stat().st_mode & 0o777 == 0o600
    # a restart serves the stored certificate without a new CSR
    again = ServingCertificate(api, ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), tmp_path / "pki", "node1", [])
    assert again.load_existing() and len(api.created) == 1


async def test_denied_csr_is_an_error_naming_it(tmp_path):
    api = FakeCSRs(PKI(tmp_path / "ca"), deny=True)
    cert = ServingCertificate(api, ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), tmp_path / "pki", "node1", [])
    with pytest.raises(CSRDenied, match="csr-1 denied: no"):
        await cert.obtain()
    assert not cert.ready.is_set()


def test_rotation_deadline_is_70_to_90_percent_of_the_lifetime(tmp_path):
    pki = PKI(tmp_path / "ca")
    _, csr = key_and_request("node1", ["node1"], ["192.0.2.2"])
    pem = pki.sign_csr(csr, 1000)
    start, end = validity(pem)
    for seed in range(20):
        deadline = rotation_deadline(pem, random.Random(seed))
        assert start + (end - start) * 0.7 <= deadline <= start + (end - start) * 0.9
    assert end - start == dt.timedelta(seconds=1005)
