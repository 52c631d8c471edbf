"""projected.sources[].clusterTrustBundle (ClusterTrustBundleProjection, GA in Kubernetes 1.37):
by name or by signer and label selector, every certificate once, the kubelet's errors."""

from __future__ import annotations

import base64

import pytest
from cryptography import x509

from services.volume.fake_objects import FakeObjectSource
from services.volume.objects import STATIC_POD_OBJECTS
from services.volume.projection import NodeAllocatable, VolumeSourceError, build_payload
from services.volume.trust_bundles import TrustBundleError, label_selector, normalize
from shared.model.podspec import validate_pod
from tests.cluster.pki import self_signed_ca_pem

NODE = NodeAllocatable(cpu_millicores=2000, memory_bytes=4 * 2**30)
SIGNER = "example.com/my-signer"


A, B, C = self_signed_ca_pem("a"), self_signed_ca_pem("b"), self_signed_ca_pem("c")


def _bundle(name, pem, signer=SIGNER, labels=None):
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"signerName": signer, "trustBundle": pem}}


def _pod():
    return validate_pod({"metadata": {"name": "p", "namespace": "ns1", "uid": "u1"},
                         "spec": {"containers": [{"name": "c", "image": "i:1"}]}})


async def _project(objects, **source):
    payload = await build_payload("projected", {"sources": [{"clusterTrustBundle": {"path": "ca.pem", **source}}]},
                                  _pod(), objects, NODE)
    return payload["ca.pem"].data.decode()


def _norm(pems: str) -> str:
    return normalize([_bundle("x", pems)]).decode()


def _certs(pem: str) -> list[str]:
    return [b for b in pem.split("-----END CERTIFICATE-----\n") if b]


async def test_by_name_the_bundles_certificates_each_once():
    objects = FakeObjectSource()
    objects.trust_bundles["one"] = _bundle("one", A + B + A)
    pem = await _project(objects, name="one")
    assert len(_certs(pem)) == 2 and {x509.load_pem_x509_certificate(c.encode() + b"-----END CERTIFICATE-----\n")
                                       .subject.rfc4514_string() for c in _certs(pem)} == {"CN=a", "CN=b"}
    assert pem == _norm(B + A), "the order is fixed: the file changes only with the bundles"


async def test_by_signer_every_matching_bundle_of_that_signer():
    objects = FakeObjectSource()
    objects.trust_bundles.update({
        "s1": _bundle("s1", A, labels={"team": "x"}), "s2": _bundle("s2", B + A, labels={"team": "x"}),
        "other-signer": _bundle("o", C, signer="example.com/other", labels={"team": "x"}),
        "other-label": _bundle("l", C, labels={"team": "y"})})
    pem = await _project(objects, signerName=SIGNER, labelSelector={"matchLabels": {"team": "x"}})
    assert pem == _norm(A + B)
    assert objects.bundle_selectors == ["team=x"]
    assert await _project(objects, signerName=SIGNER, labelSelector={}) == _norm(A + B + C)


async def test_a_signer_without_a_selector_matches_nothing_as_in_the_kubelet():
    objects = FakeObjectSource()
    objects.trust_bundles["s1"] = _bundle("s1", A)
    with pytest.raises(VolumeSourceError, match="combination of signerName and labelSelector matched zero "
                                                "ClusterTrustBundles"):
        await _project(objects, signerName=SIGNER)
    assert objects.bundle_selectors == [], "the API is not even asked"
    assert await _project(objects, signerName=SIGNER, optional=True) == ""


async def test_a_missing_bundle_is_an_error_unless_optional():
    objects = FakeObjectSource()
    with pytest.raises(VolumeSourceError, match='clustertrustbundles.certificates.k8s.io "gone" not found'):
        await _project(objects, name="gone")
    assert await _project(objects, name="gone", optional=True) == ""
    with pytest.raises(VolumeSourceError, match="requires either name or signerName"):
        await _project(objects)


async def test_garbage_in_a_bundle_is_not_passed_on():
    objects = FakeObjectSource()
    junk = "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----\n"
    objects.trust_bundles["one"] = _bundle("one", junk + A + "trailing text\n")
    assert await _project(objects, name="one") == _norm(A)
    der = base64.b64decode("".join(A.splitlines()[1:-1]))
    assert der in base64.b64decode("".join((await _project(objects, name="one")).splitlines()[1:-1]))


@pytest.mark.parametrize("selector, text", [
    ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                           {"key": "tier", "operator": "NotIn", "values": ["x"]},
                           {"key": "has", "operator": "Exists"}, {"key": "no", "operator": "DoesNotExist"}]},
     "env in (dev,prod),tier notin (x),has,!no"),
    ({}, ""), (None, None),
])
def test_label_selectors_as_the_api_takes_them(selector, text):
    assert label_selector(selector) == text


def test_an_unknown_operator_is_the_kubelets_error():
    with pytest.raises(TrustBundleError, match='"Near" is not a valid label selector operator'):
        label_selector({"matchExpressions": [{"key": "a", "operator": "Near"}]})


async def test_static_pods_may_not_project_trust_bundles():
    with pytest.raises(VolumeSourceError, match="static pods may not use clusterTrustBundle projections"):
        await _project(STATIC_POD_OBJECTS, name="one")
