"""The pod's kubelet-managed /etc/hosts."""

from __future__ import annotations

import pytest

from services.pod_sync.etc_hosts import hosts_content, wants_managed_hosts, write_hosts_file
from shared.model.podspec import ManifestInvalid, validate_pod
from tests.unit.test_syncer import manifest, want


def pod(**spec):
    return validate_pod({"metadata": {"name": "web", "namespace": "ns1", "uid": "u1"},
                         "spec": {"containers": [{"name": "c", "image": "i"}], **spec}})


def test_pod_network_pod():
    assert hosts_content(pod(), "10.88.0.5", "web", "cluster.local") == (
        "# Kubernetes-managed hosts file.\n"
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
        "fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
        "10.88.0.5\tweb\n")


def test_subdomain_and_host_aliases():
    p = pod(hostname="db-0", subdomain="db", hostAliases=[{"ip": "123.45.67.89", "hostnames": ["foo.local", "bar"]}])
    text = hosts_content(p, "10.88.0.5", "db-0", "cluster.local")
    assert "10.88.0.5\tdb-0.db.ns1.svc.cluster.local\tdb-0\n" in text
    assert text.endswith("\n# Entries added by HostAliases.\n123.45.67.89\tfoo.local\tbar\n")


def test_host_network_pod_gets_the_nodes_file():
    text = hosts_content(pod(hostNetwork=True), "192.0.2.2", "web", "", node_hosts="127.0.0.1 localhost\n")
    assert text == "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"


def test_a_container_mounting_its_own_etc_hosts_keeps_it():
    p = validate_pod({"metadata": {"name": "p"}, "spec": {"volumes": [{"name": "h", "hostPath": {"path": "/etc/hosts"}}],
                      "containers": [{"name": "c", "image": "i", "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]},
                                     {"name": "d", "image": "i"}]}})
    assert not wants_managed_hosts(p.spec.containers[0], "10.88.0.5")
    assert wants_managed_hosts(p.spec.containers[1], "10.88.0.5")
    assert not wants_managed_hosts(p.spec.containers[1], ""), "no IP yet: no file"


def test_written_atomically(tmp_path):
    path = write_hosts_file(tmp_path / "u1", "one\n")
    assert path.read_text() == "one\n" and oct(path.stat().st_mode & 0o777) == "0o644"
    assert write_hosts_file(tmp_path / "u1", "two\n").read_text() == "two\n"
    assert [p.name for p in (tmp_path / "u1").iterdir()] == ["etc-hosts"]


@pytest.mark.parametrize("alias, message", [
    ({"ip": "not-an-ip", "hostnames": ["a"]}, "is not an IP address"),
    ({"ip": "1.2.3.4", "hostnames": ["a\n6.6.6.6 evil"]}, "RFC 1123 subdomain"),
])
def test_host_aliases_that_would_inject_lines_are_refused(alias, message):
    with pytest.raises(ManifestInvalid, match=message):
        pod(hostAliases=[alias])


@pytest.mark.parametrize("uid", ["../../etc", "a/b", "..", ".", "x" * 200])
def test_a_uid_that_is_not_one_path_component_is_refused(uid):
    with pytest.raises(ManifestInvalid, match="is not a UID"):
        validate_pod({"metadata": {"name": "p", "uid": uid}, "spec": {"containers": [{"name": "c", "image": "i"}]}})


async def test_containers_get_the_file_mounted(syncer, rt, store, node):
    want(store, manifest(hostAliases=[{"ip": "1.2.3.4", "hostnames": ["alias"]}]))
    await syncer.sync("uid1")
    [c] = rt.running()
    mounts = {m.container_path: m.host_path for m in rt.created_configs[c.id].mounts}
    assert mounts["/etc/hosts"] == str(node.pods_dir / "uid1" / "etc-hosts")
    text = (node.pods_dir / "uid1" / "etc-hosts").read_text()
    assert "\tp\n" in text and "1.2.3.4\talias\n" in text
