"""Pod fields that become words of files the node writes (the pod's /etc/hosts, the sandbox's
resolv.conf and hostname, /proc/sys paths): validated as the API server validates them, for
static and API pods alike, and refused again where the files are written."""

from __future__ import annotations

import pytest

from services.pod_sync.api_source import ApiPodSource
from services.pod_sync.dns import dns_config
from services.pod_sync.etc_hosts import hosts_content
from services.pod_sync.runtime_config import pod_hostname
from shared.bus.events import RecordingRecorder
from shared.model.ip import ip_address
from shared.model.podspec import ManifestInvalid, validate_pod
from shared.store import RefusedPod
from tests.unit.test_pod_isolation import settings
from tests.unit.test_syncer import manifest, want

INJECTED = "a\n6.6.6.6 evil"


def pod(**spec):
    return validate_pod({"metadata": {"name": "p", "namespace": "ns1", "uid": "u1"},
                         "spec": {"containers": [{"name": "c", "image": "i:1"}], **spec}})


@pytest.mark.parametrize("spec, names", [
    ({"hostname": INJECTED}, "spec.hostname: 'a\\n6.6.6.6 evil' must be a lowercase RFC 1123 label"),
    ({"hostname": "Web"}, "spec.hostname: 'Web' must be a lowercase RFC 1123 label"),
    ({"hostname": "a" * 64}, "spec.hostname: "),
    ({"hostname": "a.b"}, "spec.hostname: "),
    ({"subdomain": INJECTED}, "spec.subdomain: 'a\\n6.6.6.6 evil' must be a lowercase RFC 1123 label"),
    ({"subdomain": "db svc"}, "spec.subdomain: "),
    ({"hostAliases": [{"ip": "1.2.3.4\n6.6.6.6", "hostnames": ["x"]}]}, "spec.hostAliases[0].ip: "),
    # Python's parser takes an IPv6 scope of any text; Go's (the API server's) takes none.
    ({"hostAliases": [{"ip": "fe80::1%x\n6.6.6.6 evil", "hostnames": ["x"]}]}, "spec.hostAliases[0].ip: "),
    ({"hostAliases": [{"ip": "1.2.3.4", "hostnames": ["ok", INJECTED]}]}, "spec.hostAliases[0].hostnames: "),
    ({"hostAliases": [{"ip": "1.2.3.4", "hostnames": ["a b"]}]}, "spec.hostAliases[0].hostnames: "),
    ({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1\nnameserver 6.6.6.6"]}},
     "spec.dnsConfig.nameservers: "),
    ({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["fe80::1%eth0\nnameserver 6.6.6.6"]}},
     "spec.dnsConfig.nameservers: "),
    ({"dnsConfig": {"searches": ["a.example\nnameserver 6.6.6.6"]}}, "spec.dnsConfig.searches: search domain"),
    ({"dnsConfig": {"searches": ["a.example 6.6.6.6"]}}, "spec.dnsConfig.searches: search domain"),
    ({"dnsConfig": {"searches": ["A.example"]}}, "spec.dnsConfig.searches: search domain"),
    ({"dnsConfig": {"searches": [f"d{i}.example" for i in range(33)]}}, "spec.dnsConfig.searches: "),
    ({"dnsConfig": {"searches": [f"{'a' * 63}.{'b' * 10}{i}" for i in range(32)]}},
     "spec.dnsConfig.searches: must not have more than 2048 characters"),
    ({"dnsConfig": {"options": [{"name": "ndots\nnameserver 6.6.6.6"}]}}, "spec.dnsConfig.options[0].name: "),
    ({"dnsConfig": {"options": [{"name": "ndots", "value": "1 6.6.6.6"}]}}, "spec.dnsConfig.options[0].value: "),
    ({"dnsConfig": {"options": [{"name": ""}]}}, "spec.dnsConfig.options[0].name: "),
    ({"dnsPolicy": "None"}, "dnsConfig.nameservers: Required value"),
    ({"dnsPolicy": "None", "dnsConfig": {"searches": ["a.example"]}}, "dnsConfig.nameservers: Required value"),
    ({"securityContext": {"sysctls": [{"name": "net/../../../sys/kernel/x", "value": "1"}]}},
     "spec.securityContext.sysctls[0].name: "),
    ({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies\nkernel.x", "value": "1"}]}},
     "spec.securityContext.sysctls[0].name: "),
    ({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"},
                                      {"name": "net.ipv4.tcp_syncookies", "value": "0"}]}},
     "spec.securityContext.sysctls: [1]: Duplicate value: 'net.ipv4.tcp_syncookies'"),
])
def test_fields_that_would_write_lines_of_their_own_are_refused_naming_the_field(spec, names):
    with pytest.raises(ManifestInvalid) as err:
        pod(**spec)
    assert names in str(err.value)
    assert "\n" not in str(err.value), "the error is one line: the value is quoted, not written out"


@pytest.mark.parametrize("spec", [
    {"hostname": "web-0", "subdomain": "db"},
    {"hostAliases": [{"ip": "fe80::1", "hostnames": ["foo.local", "bar"]}]},
    {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["192.0.2.53", "2001:db8::53"],
                                        "searches": ["a.example", "b.example.", "_srv.example", "."],
                                        "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}},
    {"dnsConfig": {"searches": [f"d{i}.example" for i in range(32)]}},
    {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"},
                                     {"name": "net/ipv4/ip_local_port_range", "value": "1024 65000"}]}},
])
def test_what_the_api_server_accepts_is_accepted(spec):
    pod(**spec)


def test_ip_addresses_take_no_scope():
    assert ip_address("2001:db8::1") == "2001:db8::1"
    with pytest.raises(ValueError, match="is not an IP address"):
        ip_address("fe80::1%eth0")


def test_an_api_pod_with_an_injected_hostname_is_refused_with_an_event_naming_the_field(store):
    events = RecordingRecorder()
    source = ApiPodSource(object(), "node1", store, events=events)
    source.apply_event("ADDED", {"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": "evil", "namespace": "ns1", "uid": "u1", "resourceVersion": "1"},
                                 "spec": {"nodeName": "node1", "hostname": INJECTED,
                                          "containers": [{"name": "app", "image": "busybox"}]}})
    [(kind, reason, message)] = [e[:3] for e in events.events]
    assert kind == "Warning" and "spec.hostname" in message, message
    with store.session() as s:
        assert s.get(RefusedPod, "u1") is not None


# -- the second line: where the files are written ------------------------------------------------

def test_the_hosts_file_refuses_a_word_with_a_line_in_it_whatever_let_it_through():
    p = pod(subdomain="db", hostAliases=[{"ip": "1.2.3.4", "hostnames": ["x"]}])
    assert "1.2.3.4\tx\n" in hosts_content(p, "10.88.0.5", "web", "cluster.local")
    with pytest.raises(ValueError, match="refusing to write the pod's /etc/hosts"):
        hosts_content(p, "10.88.0.5", INJECTED, "cluster.local")
    with pytest.raises(ValueError, match="refusing to write the pod's /etc/hosts"):
        hosts_content(p, "10.88.0.5", "web", "cluster.local\n6.6.6.6 evil")
    p.spec.hostAliases[0].hostnames.append("y\t6.6.6.6")  # assigned after validation
    with pytest.raises(ValueError, match="refusing to write the pod's /etc/hosts"):
        hosts_content(p, "10.88.0.5", "web", "cluster.local")
    p = pod()
    p.spec.hostname = INJECTED
    with pytest.raises(ValueError, match="'a\\\\n6.6.6.6 evil' is not a single word"):
        hosts_content(p, "10.88.0.5", pod_hostname(p), "cluster.local")


def test_resolv_conf_refuses_a_word_with_a_line_in_it_whatever_let_it_through():
    s = settings(cluster_dns=["10.96.0.10"], cluster_domain="cluster.local\nnameserver 6.6.6.6")
    with pytest.raises(ValueError, match="refusing to write the pod's resolv.conf"):
        dns_config(pod(), s)
    p = pod(dnsConfig={"searches": ["a.example"]})
    p.spec.dnsConfig.searches.append("b.example\nnameserver 6.6.6.6")
    with pytest.raises(ValueError, match="refusing to write the pod's resolv.conf"):
        dns_config(p, settings(cluster_dns=["10.96.0.10"], cluster_domain="cluster.local"))


async def test_a_sandbox_config_that_cannot_be_written_is_an_event_and_nothing_starts(syncer, rt, store, settings,
                                                                                      events):
    settings.kubelet.cluster_dns = ["10.96.0.10"]
    settings.kubelet.cluster_domain = "cluster.local\nnameserver 6.6.6.6"
    want(store, manifest())
    await syncer.sync("uid1")
    assert not rt.ops("run_podsandbox", "create_container")
    [message] = [m for kind, reason, m, *_ in events.events if reason == "FailedCreatePodSandBox"]
    assert "refusing to write the pod's resolv.conf" in message
