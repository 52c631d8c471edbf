"""spec.hostnameOverride (HostnameOverride, GA in Kubernetes 1.37): the pod's hostname whatever
its name, hostname and subdomain say, with the API server's rules for it."""

from __future__ import annotations

import pytest

from services.pod_sync.etc_hosts import hosts_content
from services.pod_sync.runtime_config import pod_hostname
from shared.model.podspec import ManifestInvalid, validate_pod
from tests.unit.test_syncer import manifest, want


def pod(**spec):
    return validate_pod({"metadata": {"name": "web", "namespace": "ns1", "uid": "u1"},
                         "spec": {"containers": [{"name": "c", "image": "i"}], **spec}})


def test_it_is_the_hostname_and_makes_no_fqdn():
    p = pod(hostname="db-0", subdomain="db", hostnameOverride="build.example.com")
    assert pod_hostname(p) == "build.example.com"
    text = hosts_content(p, "10.88.0.5", pod_hostname(p), "cluster.local")
    assert text.endswith("10.88.0.5\tbuild.example.com\n"), "no db-0.db.ns1.svc.cluster.local entry"
    assert pod_hostname(pod(hostname="db-0")) == "db-0" and pod_hostname(pod()) == "web"


def test_a_64_character_override_is_cut_to_63_as_the_kubelet_cuts_it():
    assert pod_hostname(pod(hostnameOverride="a" * 62 + ".b")) == "a" * 62
    assert pod_hostname(pod(hostnameOverride="a" * 64)) == "a" * 63


@pytest.mark.parametrize("spec, error", [
    ({"hostnameOverride": "Build"}, 'hostnameOverride: Invalid value: "Build": a lowercase RFC 1123 subdomain'),
    ({"hostnameOverride": "x\n127.0.0.1 evil"}, r'Invalid value: "x\n127.0.0.1 evil"'),
    ({"hostnameOverride": "a" * 65}, "hostnameOverride: Too long: may not be more than 64 bytes"),
    ({"hostnameOverride": "box", "hostNetwork": True},
     "hostnameOverride: Forbidden: may not be specified when hostNetwork is true"),
    ({"hostnameOverride": ""}, 'hostnameOverride: Invalid value: ""'),
])
def test_the_api_servers_rules_refuse_the_pod(spec, error):
    with pytest.raises(ManifestInvalid) as exc:
        pod(**spec)
    assert error in str(exc.value)


async def test_the_sandbox_gets_it_as_its_hostname(syncer, rt, store):
    want(store, manifest(hostnameOverride="renamed", hostname="ignored"))
    await syncer.sync("uid1")
    [sandbox] = rt.sandbox_configs.values()
    assert sandbox.hostname == "renamed"
