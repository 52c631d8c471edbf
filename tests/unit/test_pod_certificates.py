"""projected.sources[].podCertificate (GA in Kubernetes 1.37): the key made on the node, the
PodCertificateRequest for it, the issued chain in the volume, refresh, denial, and what is refused."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from services.volume.fake_objects import FakeObjectSource
from services.volume.objects import STATIC_POD_OBJECTS
from services.volume.pod_certificates import PodCertificates, clean_chain, new_key_and_request
from services.volume.projection import NodeAllocatable, VolumeSourceError, build_payload
from shared.model.podspec import validate_pod

NODE = NodeAllocatable(cpu_millicores=2000, memory_bytes=4 * 2**30)
SIGNER = "example.com/pod-signer"
CA_KEY = ec.generate_private_key(ec.SECP256R1())
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def objects(clock):
    fake = FakeObjectSource()
    fake.certificates = PodCertificates(fake.certificates.event, clock=clock, jitter=lambda: 0.0)
    return fake


def _pod(fs_group=None):
    spec = {"serviceAccountName": "robot", "containers": [{"name": "c", "image": "i:1"}]}
    if fs_group is not None:
        spec["securityContext"] = {"fsGroup": fs_group}
    return validate_pod({"metadata": {"name": "p", "namespace": "ns1", "uid": "u1"}, "spec": spec})


def _source(**extra):
    return {"signerName": SIGNER, "keyType": "ECDSAP256", "credentialBundlePath": "bundle.pem", **extra}


async def _files(objects, pod=None, **source):
    return await build_payload("projected", {"sources": [{"podCertificate": _source(**source)}]},
                               pod or _pod(), objects, NODE, "certs")


def _issue(objects, name, lifetime=86400, refresh_after=43200, ns="ns1"):
    """Answer the request as a signer would: a leaf for its public key, signed by CA_KEY."""
    pcr = objects.pod_certificate_requests[(ns, name)]
    request = x509.load_der_x509_csr(base64.b64decode(pcr["spec"]["stubPKCS10Request"]))
    start = dt.datetime.fromtimestamp(T0, dt.timezone.utc)
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(
        x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "pod-ca")]))
        .public_key(request.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(start + dt.timedelta(seconds=lifetime))
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier("spiffe://x/p")]), critical=False)
        .sign(CA_KEY, hashes.SHA256()))
    pem = leaf.public_bytes(serialization.Encoding.PEM).decode()
    pcr["status"] = {"conditions": [{"type": "Issued", "status": "True", "reason": "Reason"}],
                     "certificateChain": pem, "notBefore": start.isoformat(),
                     "beginRefreshAt": (start + dt.timedelta(seconds=refresh_after)).isoformat(),
                     "notAfter": (start + dt.timedelta(seconds=lifetime)).isoformat()}
    return leaf


def _public(key_or_cert):
    return key_or_cert.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)


async def test_the_pod_waits_for_its_certificate_then_gets_the_key_and_chain(objects):
    with pytest.raises(VolumeSourceError, match="credential bundle is not issued yet"):
        await _files(objects, maxExpirationSeconds=7200, userAnnotations={"example.com/path": "/svc"})
    [((ns, name), pcr)] = objects.pod_certificate_requests.items()
    assert ns == "ns1" and pcr["metadata"]["generateName"] == "req-"
    assert pcr["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}]
    spec = pcr["spec"]
    assert {k: v for k, v in spec.items() if k != "stubPKCS10Request"} == {
        "signerName": SIGNER, "podName": "p", "podUID": "u1", "serviceAccountName": "robot",
        "serviceAccountUID": "uid-of-sa-robot", "nodeName": "node1", "nodeUID": "uid-of-node1",
        "maxExpirationSeconds": 7200, "unverifiedUserAnnotations": {"example.com/path": "/svc"}}
    request = x509.load_der_x509_csr(base64.b64decode(spec["stubPKCS10Request"]))
    assert request.is_signature_valid and list(request.subject) == []  # an empty request: only the key
    assert isinstance(request.public_key(), ec.EllipticCurvePublicKey)

    with pytest.raises(VolumeSourceError, match="not issued yet"):  # asked again: still the same request
        await _files(objects)
    assert len(objects.pod_certificate_requests) == 1

    leaf = _issue(objects, name)
    bundle = (await _files(objects))["bundle.pem"]
    key_pem, _, chain = bundle.data.partition(b"-----END PRIVATE KEY-----\n")
    key = serialization.load_pem_private_key(key_pem + b"-----END PRIVATE KEY-----\n", None)
    assert _public(key) == _public(leaf) == _public(request)
    assert chain == leaf.public_bytes(serialization.Encoding.PEM)
    assert bundle.mode == 0o644


async def test_key_and_chain_in_separate_files_are_0600_with_an_fs_group(objects):
    with pytest.raises(VolumeSourceError):
        await _files(objects, credentialBundlePath="", keyPath="tls.key", certificateChainPath="tls.crt")
    leaf = _issue(objects, "req-0")
    files = await _files(objects, _pod(fs_group=2000), credentialBundlePath="", keyPath="tls.key",
                         certificateChainPath="tls.crt")
    assert sorted(files) == ["tls.crt", "tls.key"]
    assert files["tls.crt"].data == leaf.public_bytes(serialization.Encoding.PEM)
    assert _public(serialization.load_pem_private_key(files["tls.key"].data, None)) == _public(leaf)
    assert {f.mode for f in files.values()} == {0o600}  # the group gets read access after (fsGroup)


async def test_a_denied_request_fails_the_volume_for_good_and_is_told_once(objects):
    with pytest.raises(VolumeSourceError):
        await _files(objects)
    objects.pod_certificate_requests[("ns1", "req-0")]["status"] = {"conditions": [
        {"type": "Denied", "status": "True", "reason": "UnsupportedKeyType", "message": "use ED25519"}]}
    for _ in range(2):
        with pytest.raises(VolumeSourceError) as err:
            await _files(objects)
        assert str(err.value) == ('PodCertificateRequest was permanently denied: reason="UnsupportedKeyType" '
                                  'message="use ED25519"')
    assert len(objects.pod_certificate_requests) == 1  # no new request: a denial is final
    assert objects.events == [("u1", "Warning", "Denied", 'PodCertificateRequest ns1/req-0 was denied, '
                                                           'reason="UnsupportedKeyType", message="use ED25519"')]
    assert objects.certificates.states() == {(SIGNER, "denied"): 1}


async def test_a_failed_request_fails_the_volume(objects):
    with pytest.raises(VolumeSourceError):
        await _files(objects)
    objects.pod_certificate_requests[("ns1", "req-0")]["status"] = {"conditions": [
        {"type": "Failed", "status": "True", "reason": "SignerDown", "message": "try later"}]}
    with pytest.raises(VolumeSourceError, match='permanently failed: reason="SignerDown"'):
        await _files(objects)


async def test_the_certificate_is_refreshed_from_begin_refresh_at_keeping_the_old_one_meanwhile(objects, clock):
    with pytest.raises(VolumeSourceError):
        await _files(objects)
    first = _issue(objects, "req-0", lifetime=7200, refresh_after=3600)
    old = (await _files(objects))["bundle.pem"].data
    assert objects.certificates.states() == {(SIGNER, "fresh"): 1}
    clock.now = T0 + 3600  # beginRefreshAt: a new key and request; the volume keeps the current pair
    assert (await _files(objects))["bundle.pem"].data == old
    assert len(objects.pod_certificate_requests) == 2
    clock.now = T0 + 3600 + 601  # not issued 10 minutes on: overdue, told once
    assert (await _files(objects))["bundle.pem"].data == old
    await _files(objects)
    assert objects.certificates.states() == {(SIGNER, "overdue_for_refresh"): 1}
    assert [e[2] for e in objects.events] == ["CertificateOverdueForRefresh"]
    second = _issue(objects, "req-1")
    new = (await _files(objects))["bundle.pem"].data
    assert new != old and new.endswith(second.public_bytes(serialization.Encoding.PEM))
    assert _public(first) != _public(second)


async def test_a_request_deleted_before_it_is_answered_is_made_again_after_ten_minutes(objects, clock):
    with pytest.raises(VolumeSourceError):
        await _files(objects)
    del objects.pod_certificate_requests[("ns1", "req-0")]
    with pytest.raises(VolumeSourceError, match="not issued yet"):
        await _files(objects)
    clock.now = T0 + 601
    with pytest.raises(VolumeSourceError, match='"ns1/req-0" appears to have been deleted'):
        await _files(objects)
    with pytest.raises(VolumeSourceError, match="not issued yet"):
        await _files(objects)
    assert list(objects.pod_certificate_requests) == [("ns1", "req-1")]


async def test_a_forgotten_pod_asks_again(objects):
    with pytest.raises(VolumeSourceError):
        await _files(objects)
    objects.certificates.forget("u1")
    assert objects.certificates.states() == {}
    with pytest.raises(VolumeSourceError):
        await _files(objects)
    assert len(objects.pod_certificate_requests) == 2


@pytest.mark.parametrize("key_type,kind,size", [
    ("RSA3072", rsa.RSAPublicKey, 3072), ("ECDSAP384", ec.EllipticCurvePublicKey, 384),
    ("ECDSAP521", ec.EllipticCurvePublicKey, 521), ("ED25519", ed25519.Ed25519PublicKey, None)])
def test_each_key_type_makes_its_key_and_a_request_signed_with_it(key_type, kind, size):
    key_pem, der = new_key_and_request(key_type)
    request = x509.load_der_x509_csr(der)
    key = serialization.load_pem_private_key(key_pem, None)
    assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")  # PKCS#8
    assert isinstance(request.public_key(), kind) and request.is_signature_valid
    assert _public(key) == _public(request)
    if size is not None:
        assert request.public_key().key_size == size


def test_the_issued_chain_is_written_as_plain_certificate_blocks():
    leaf = CA_KEY.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    b64 = base64.b64encode(leaf).decode()
    text = f"junk\n-----BEGIN TRUSTED CERTIFICATE-----\n{b64}\n-----END TRUSTED CERTIFICATE-----\ntail"
    assert clean_chain(text) == f"-----BEGIN CERTIFICATE-----\n{b64[:64]}\n{b64[64:]}\n-----END CERTIFICATE-----\n".encode()


@pytest.mark.parametrize("source,message", [
    ({"keyType": "DSA1024"}, "keyType 'DSA1024' is not one of"),
    ({"signerName": ""}, "signerName is required"),
    ({"maxExpirationSeconds": 60}, "maxExpirationSeconds 60 must be between 3600 and 7862400"),
    ({"userAnnotations": {"a": 1}}, "userAnnotations must map strings to strings"),
    ({"credentialBundlePath": ""}, "needs credentialBundlePath"),
    ({"credentialBundlePath": "../../etc/cron.d/x"}, "must not contain '..'"),
])
async def test_a_bad_source_is_refused_with_what_is_wrong(objects, source, message):
    if "credentialBundlePath" in source and source["credentialBundlePath"]:
        with pytest.raises(VolumeSourceError):
            await _files(objects, **source)
        _issue(objects, "req-0")
    with pytest.raises(VolumeSourceError, match=message.replace("(", r"\(")):
        await _files(objects, **source)


async def test_static_pods_may_not_use_pod_certificates():
    with pytest.raises(VolumeSourceError, match="static pods may not use podCertificate projections"):
        await _files(STATIC_POD_OBJECTS)


async def test_the_states_are_exported_as_the_kubelets_gauge(objects):
    from prometheus_client import CollectorRegistry, generate_latest

    from services.volume.metrics import PodCertificateStates

    with pytest.raises(VolumeSourceError):
        await _files(objects)
    gauge = PodCertificateStates()
    gauge.source = objects.certificates.states
    registry = CollectorRegistry()
    registry.register(gauge)
    assert f'kubelet_podcertificate_states{{signer_name="{SIGNER}",state="not_yet_issued"}} 1.0' in \
        generate_latest(registry).decode()


async def test_keys_are_made_on_their_own_thread_not_the_shared_one(objects, monkeypatch):
    """A pod with many RSA sources keeps one thread busy, not the threads that write every other
    pod's volume files (asyncio.to_thread). A source waiting for its certificate does not hold
    back the next one's request."""
    import threading

    from services.volume import pod_certificates

    threads = []
    make = pod_certificates.new_key_and_request

    def recorded(key_type):
        threads.append(threading.current_thread().name)
        return make(key_type)

    monkeypatch.setattr(pod_certificates, "new_key_and_request", recorded)
    with pytest.raises(VolumeSourceError):
        await build_payload("projected", {"sources": [{"podCertificate": _source(credentialBundlePath=f"{i}.pem")}
                                                      for i in range(3)]}, _pod(), objects, NODE, "certs")
    # Each source asked at once, though none is issued yet; one key at a time, on one thread.
    assert len(threads) == 3 and {t.split("_")[0] for t in threads} == {"pod-certificate-keys"}
    assert len(objects.pod_certificate_requests) == 3


async def test_the_errors_of_several_sources_are_told_together(objects):
    sources = [{"configMap": {"name": "absent"}}, {"podCertificate": _source()},
               {"podCertificate": _source(credentialBundlePath="two.pem")}]
    with pytest.raises(VolumeSourceError) as err:
        await build_payload("projected", {"sources": sources}, _pod(), objects, NODE, "certs")
    assert str(err.value) == '[configmap "absent" not found, credential bundle is not issued yet]'


def test_the_volume_service_loads_cryptography_only_for_a_pod_certificate():
    """Its 48 modules would be memory in every volume service; only a node whose pods ask for
    pod certificates needs them."""
    import subprocess
    import sys
    from pathlib import Path

    script = ("import sys\n"
              "import services.volume.__main__, services.volume.api_objects, services.volume.pod_certificates\n"
              "print(any(m.startswith('cryptography') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
