"""What a pod's spec asks of the runtime for its isolation and DNS, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from cri_api.v1 import api_pb2 as cri

from services.pod_sync.admission import admit_sysctls
from services.pod_sync.dns import dns_config, host_resolv_conf
from services.pod_sync.security import container_security_context, namespaces, sandbox_security_context
from shared.config.settings import ConfigError, KubeletConfiguration, NodeSettings, load_kubelet_config
from shared.model.podspec import ManifestInvalid, validate_pod


def pod(**spec):
    containers = spec.pop("containers", [{"name": "c", "image": "i:1"}])
    return validate_pod({"metadata": {"name": "p", "namespace": "ns1", "uid": "u1"},
                         "spec": {"containers": containers, **spec}})


@pytest.mark.parametrize("spec, want", [
    ({}, (cri.POD, cri.CONTAINER, cri.POD)),
    ({"hostNetwork": True}, (cri.NODE, cri.CONTAINER, cri.POD)),
    ({"hostPID": True}, (cri.POD, cri.NODE, cri.POD)),
    ({"shareProcessNamespace": True}, (cri.POD, cri.POD, cri.POD)),
    ({"hostIPC": True}, (cri.POD, cri.CONTAINER, cri.NODE)),
])
def test_namespaces(spec, want):
    ns = namespaces(pod(**spec))
    assert (ns.network, ns.pid, ns.ipc) == want


def test_seccomp_profiles_pod_level_and_container_override(tmp_path):
    p = pod(securityContext={"seccompProfile": {"type": "RuntimeDefault"}}, containers=[
        {"name": "a", "image": "i:1"},
        {"name": "b", "image": "i:1", "securityContext": {"seccompProfile": {
            "type": "Localhost", "localhostProfile": "profiles/audit.json"}}}])
    assert sandbox_security_context(p, tmp_path).seccomp.profile_type == cri.SecurityProfile.RuntimeDefault
    a = container_security_context(p, p.spec.containers[0], tmp_path)
    b = container_security_context(p, p.spec.containers[1], tmp_path)
    assert a.seccomp.profile_type == cri.SecurityProfile.RuntimeDefault
    assert (b.seccomp.profile_type, b.seccomp.localhost_ref) == (cri.SecurityProfile.Localhost,
                                                                 str(tmp_path / "profiles/audit.json"))
    plain = pod()
    assert not container_security_context(plain, plain.spec.containers[0], tmp_path).HasField("seccomp")


def test_seccomp_default_is_runtime_default_for_containers_naming_no_profile(tmp_path):
    plain = pod()
    sc = container_security_context(plain, plain.spec.containers[0], tmp_path, seccomp_default=True)
    assert sc.seccomp.profile_type == cri.SecurityProfile.RuntimeDefault
    unconfined = pod(securityContext={"seccompProfile": {"type": "Unconfined"}})
    sc = container_security_context(unconfined, unconfined.spec.containers[0], tmp_path, seccomp_default=True)
    assert sc.seccomp.profile_type == cri.SecurityProfile.Unconfined, "the pod's own choice stays"


@pytest.mark.parametrize("profile", ["/etc/shadow", "../../etc/passwd", "a/../../b", "", "a//b"])
def test_localhost_seccomp_profiles_stay_in_their_directory(profile):
    with pytest.raises(ManifestInvalid, match="localhostProfile"):
        pod(securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": profile}})


def test_sysctls_safe_allowed_unsafe_and_host_namespaces():
    def verdict(sysctls, allowed=(), **spec):
        return admit_sysctls(pod(securityContext={"sysctls": sysctls}, **spec), list(allowed))

    assert verdict([{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}]).admitted
    v = verdict([{"name": "net.core.somaxconn", "value": "1024"}])
    assert (v.admitted, v.reason, v.message) == (False, "SysctlForbidden",
                                                 'forbidden sysctl: "net.core.somaxconn" not whitelisted')
    assert verdict([{"name": "net.core.somaxconn", "value": "1024"}], ["net.core.*"]).admitted
    v = verdict([{"name": "net.ipv4.tcp_syncookies", "value": "1"}], hostNetwork=True)
    assert v.message == 'forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled'
    v = verdict([{"name": "kernel.shm_rmid_forced", "value": "1"}], hostIPC=True)
    assert v.message == 'forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled'


@pytest.mark.parametrize("sysctl", [{"name": "kernel/../x", "value": "1"}, {"name": "Net.x", "value": "1"},
                                    {"name": "net.core.somaxconn", "value": "1\nkernel.x=1"}])
def test_malformed_sysctls_are_refused_with_the_pod(sysctl):
    with pytest.raises(ManifestInvalid, match="sysctl"):
        pod(securityContext={"sysctls": [sysctl]})


def test_allowed_unsafe_sysctls_must_be_namespaced():
    assert load_kubelet_config({"allowedUnsafeSysctls": ["net.core.*", "kernel.msgmax"]})[0].allowed_unsafe_sysctls
    with pytest.raises(ConfigError, match="allowedUnsafeSysctls.*'vm.swappiness' is not known to be namespaced"):
        load_kubelet_config({"allowedUnsafeSysctls": ["vm.swappiness"]})


def settings(**kubelet) -> NodeSettings:
    return NodeSettings(kubelet=KubeletConfiguration(**kubelet), root_dir=Path("/var/lib/pykubelet"))


def test_dns_cluster_first_plus_dns_config():
    p = pod(dnsConfig={"nameservers": ["10.0.0.53", "10.96.0.10"], "searches": ["corp.example"],
                       "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]})
    got = dns_config(p, settings(cluster_dns=["10.96.0.10"], cluster_domain="cluster.local", resolv_conf=""))
    assert list(got.servers) == ["10.96.0.10", "10.0.0.53"]
    assert list(got.searches) == ["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"]
    assert list(got.options) == ["ndots:2", "edns0"]


def test_dns_policy_none_is_only_the_pods_config():
    p = pod(dnsPolicy="None", dnsConfig={"nameservers": ["192.0.2.53"], "searches": ["a.example"]})
    got = dns_config(p, settings(cluster_dns=["10.96.0.10"], cluster_domain="cluster.local"))
    assert (list(got.servers), list(got.searches), list(got.options)) == (["192.0.2.53"], ["a.example"], [])


def test_dns_default_merges_the_nodes_resolv_conf(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text("# generated\nnameserver 192.0.2.1\nsearch node.example\noptions timeout:2 ndots:1\n")
    assert dns_config(pod(dnsPolicy="Default"), settings()) is None, "/etc/resolv.conf: the runtime copies it"
    got = dns_config(pod(dnsPolicy="Default", dnsConfig={"options": [{"name": "ndots", "value": "3"}]}),
                     settings(resolv_conf=str(conf)))
    assert (list(got.servers), list(got.searches), list(got.options)) == (
        ["192.0.2.1"], ["node.example"], ["timeout:2", "ndots:3"])
    assert list(host_resolv_conf(tmp_path / "missing").servers) == []


def test_resolv_conf_is_the_file_default_pods_get_and_adds_to_the_cluster_search_path(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 192.0.2.1\nsearch node.example corp.example\noptions timeout:2\n")
    got = dns_config(pod(dnsPolicy="Default"), settings(resolv_conf=str(conf)))
    assert (list(got.servers), list(got.searches), list(got.options)) == (
        ["192.0.2.1"], ["node.example", "corp.example"], ["timeout:2"]), "the file's content, not /etc/resolv.conf"
    got = dns_config(pod(), settings(resolv_conf=str(conf), cluster_dns=["10.96.0.10"], cluster_domain="cluster.local"))
    assert list(got.searches) == ["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local",
                                  "node.example", "corp.example"]
    assert (list(got.servers), list(got.options)) == (["10.96.0.10"], ["ndots:5"])
    got = dns_config(pod(), settings(resolv_conf="", cluster_dns=["10.96.0.10"], cluster_domain="cluster.local"))
    assert list(got.searches) == ["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"], '"": no node file'


def test_resolv_conf_relative_to_the_config_file(tmp_path):
    import argparse

    from shared.config.settings import add_node_flags, settings_from_args
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text("resolvConf: resolv/upstream.conf\n")
    parser = argparse.ArgumentParser()
    add_node_flags(parser)
    s = settings_from_args(parser.parse_args(["--config", str(cfg)]))
    assert s.kubelet.resolv_conf == str(tmp_path / "resolv" / "upstream.conf")


def test_bad_dns_config_is_refused():
    with pytest.raises(ManifestInvalid, match="nameservers"):
        pod(dnsConfig={"nameservers": ["not-an-ip"]})
    with pytest.raises(ManifestInvalid, match="search domain"):
        pod(dnsConfig={"searches": ["bad domain"]})


def test_a_privileged_container_makes_its_sandbox_privileged(tmp_path):
    for where in ("containers", "initContainers"):
        spec = {"containers": [{"name": "app", "image": "i:1"}]}
        spec.setdefault(where, []).append({"name": "priv", "image": "i:1", "securityContext": {"privileged": True}})
        p = pod(**spec)
        assert sandbox_security_context(p, tmp_path).privileged, f"a privileged one of {where}"
        priv = next(c for c in p.spec.all_containers if c.name == "priv")
        assert container_security_context(p, priv, tmp_path).privileged
        assert not container_security_context(p, p.spec.containers[0], tmp_path).privileged
    plain = pod(containers=[{"name": "c", "image": "i:1", "securityContext": {"privileged": False}}])
    assert not sandbox_security_context(plain, tmp_path).privileged


def test_every_container_gets_the_kubelets_masked_and_read_only_paths(tmp_path):
    p = pod(containers=[{"name": "c", "image": "i:1"},
                        {"name": "d", "image": "i:1", "securityContext": {"procMount": "Default"}}])
    for c in p.spec.containers:
        sc = container_security_context(p, c, tmp_path)
        assert {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"} <= set(sc.masked_paths)
        assert list(sc.readonly_paths) == ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


def test_an_unmasked_proc_mount_asks_the_runtime_to_mask_nothing(tmp_path):
    """procMount Unmasked (in a pod with a user namespace of its own): no masked and no read-only
    path, which the runtime takes as a /proc and /sys left whole; its sibling keeps the default."""
    p = pod(hostUsers=False, containers=[
        {"name": "open", "image": "i:1", "securityContext": {"procMount": "Unmasked"}},
        {"name": "plain", "image": "i:1"}],
        initContainers=[{"name": "init", "image": "i:1", "securityContext": {"procMount": "Unmasked"}}])
    for c in (p.spec.containers[0], p.spec.initContainers[0]):
        sc = container_security_context(p, c, tmp_path)
        assert list(sc.masked_paths) == [] and list(sc.readonly_paths) == []
    plain = container_security_context(p, p.spec.containers[1], tmp_path)
    assert "/proc/kcore" in plain.masked_paths and "/proc/sys" in plain.readonly_paths


@pytest.mark.parametrize("spec, error", [
    ({}, 'containers[0].securityContext.procMount: Invalid value: "Unmasked": `hostUsers` must be false to use '
         '`Unmasked`'),
    ({"hostUsers": True}, 'containers[0].securityContext.procMount: Invalid value: "Unmasked": `hostUsers` must be '
                          'false to use `Unmasked`'),
])
def test_an_unmasked_proc_mount_needs_a_user_namespace_of_the_pods_own(spec, error):
    """The API server's rule, which the kubelet also applies to static pods: /proc unmasked for a
    root that is the node's root would hand a container the host's kernel knobs."""
    with pytest.raises(ManifestInvalid) as exc:
        pod(containers=[{"name": "c", "image": "i:1", "securityContext": {"procMount": "Unmasked"}}], **spec)
    assert error in str(exc.value)
    with pytest.raises(ManifestInvalid) as exc:
        pod(containers=[{"name": "c", "image": "i:1"}],
            ephemeralContainers=[{"name": "dbg", "image": "i:1", "securityContext": {"procMount": "Unmasked"}}])
    assert 'ephemeralContainers[0].securityContext.procMount: Invalid value: "Unmasked"' in str(exc.value)


@pytest.mark.parametrize("allow, no_new_privs", [(None, False), (True, False), (False, True)])
def test_allow_privilege_escalation_both_ways(tmp_path, allow, no_new_privs):
    sc = {} if allow is None else {"allowPrivilegeEscalation": allow}
    p = pod(containers=[{"name": "c", "image": "i:1", "securityContext": sc}])
    assert container_security_context(p, p.spec.containers[0], tmp_path).no_new_privs is no_new_privs


def test_capabilities_reach_the_runtime_as_written(tmp_path):
    p = pod(containers=[{"name": "c", "image": "i:1", "securityContext": {
        "capabilities": {"add": ["NET_ADMIN", "CAP_SYS_TIME"], "drop": ["ALL"]}}}])
    caps = container_security_context(p, p.spec.containers[0], tmp_path).capabilities
    assert list(caps.add_capabilities) == ["NET_ADMIN", "CAP_SYS_TIME"] and list(caps.drop_capabilities) == ["ALL"]


@pytest.mark.parametrize("sc, error", [
    ({"privileged": True, "allowPrivilegeEscalation": False},
     "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"),
    ({"capabilities": {"add": ["CAP_SYS_ADMIN"]}, "allowPrivilegeEscalation": False},
     "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"),
    ({"capabilities": {"add": ["NET_ADMIN; rm -rf /"]}}, "is not a capability name"),
    ({"capabilities": {"drop": [""]}}, "is not a capability name"),
    ({"procMount": "Unmask"}, 'spec.containers[0].securityContext.procMount: Unsupported value: "Unmask": '
                              'supported values: "Default", "Unmasked"'),
    ({"procMount": "Default\n/proc"}, 'Unsupported value: "Default\\n/proc"'),
])
def test_contradicting_or_malformed_security_contexts_are_refused(sc, error):
    with pytest.raises(ManifestInvalid) as exc:
        pod(containers=[{"name": "c", "image": "i:1", "securityContext": sc}])
    assert error in str(exc.value)


def test_mount_propagation_as_the_kubelet_asks_the_runtime():
    from types import SimpleNamespace

    from services.pod_sync.runtime_config import volume_mounts
    modes = [None, "None", "HostToContainer", "Bidirectional"]
    p = pod(volumes=[{"name": "d", "hostPath": {"path": "/var/lib/kubelet/plugins"}}],
            containers=[{"name": "c", "image": "i:1", "securityContext": {"privileged": True},
                         "volumeMounts": [{"name": "d", "mountPath": f"/m{i}", **({"mountPropagation": m} if m else {})}
                                          for i, m in enumerate(modes)]}])
    rows = {"d": SimpleNamespace(ready=True, host_path="/var/lib/kubelet/plugins")}
    got = [m.propagation for m in volume_mounts(p, p.spec.containers[0], rows, None)]
    assert got == [cri.PROPAGATION_PRIVATE, cri.PROPAGATION_PRIVATE, cri.PROPAGATION_HOST_TO_CONTAINER,
                   cri.PROPAGATION_BIDIRECTIONAL]
