"""Pod isolation fields on real containers: namespaces, sysctls, seccomp, DNS, fsGroup and
runAsNonRoot, and a pod whose sysctl the node will not set refused as the kubelet refuses it."""

from __future__ import annotations

import os
from pathlib import Path

from tests.integration.conftest import RESOLV_SEARCH, wait_for
from tests.security.conftest import ALLOWED_UNSAFE_SYSCTL, CLUSTER_DNS, CLUSTER_DOMAIN


def sh(node, name, script, **extra):
    return {"name": name, "image": node.image("busybox"), "command": ["sh", "-c", script], **extra}


def logs(node, pod: str, container: str) -> str:
    return wait_for(lambda: node.cli("logs", pod, "-c", container).stdout.strip(), 20, f"{pod}/{container} output")


def test_namespaces_sysctls_seccomp_and_dns_reach_the_containers(pods):
    me = os.getpid()
    pods.write_pod("isolated", {
        "shareProcessNamespace": True,
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": ["192.0.2.53"], "searches": ["corp.example"], "options": [{"name": "ndots",
                                                                                                "value": "2"}]},
        "securityContext": {"sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "20000 30000"}],
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            sh(pods, "a", "exec sleep 3601"),
            sh(pods, "b", "sleep 1; ps -o args | grep -c '^sleep 3601'; cat /proc/sys/net/ipv4/ip_local_port_range; "
                          "grep Seccomp: /proc/self/status; cat /etc/resolv.conf; sleep 3600")]})
    pods.write_pod("hostpid", {"hostPID": True, "containers": [
        sh(pods, "c", f"test -d /proc/{me} && echo sees-host-pids; grep Seccomp: /proc/self/status; sleep 3600")]})
    pods.write_pod("unconfined", {"containers": [
        sh(pods, "u", "grep Seccomp: /proc/self/status; sleep 3600",
           securityContext={"seccompProfile": {"type": "Unconfined"}})]})
    pods.wait_running("isolated")
    pods.wait_running("hostpid")
    pods.wait_running("unconfined")
    out = wait_for(lambda: (o := logs(pods, "isolated", "b")) and "nameserver" in o and o, 20, "all of b's output")
    lines = out.splitlines()
    assert lines[0] == "1", f"b does not see a's sleep: {out}"
    assert lines[1].split() == ["20000", "30000"]
    assert lines[2].split() == ["Seccomp:", "2"], "RuntimeDefault filters syscalls"
    assert "nameserver 192.0.2.53" in out and "search corp.example" in out and "options ndots:2" in out
    host = logs(pods, "hostpid", "c")
    assert "sees-host-pids" in host
    # No profile named: the node's seccompDefault (tests/security/conftest.py) makes it RuntimeDefault.
    assert "Seccomp:\t2" in host.replace(" ", "\t"), host
    assert "Seccomp:\t0" in logs(pods, "unconfined", "u").replace(" ", "\t"), "Unconfined, as the pod asked"


def test_an_unsafe_sysctl_the_node_allows_is_set(pods):
    """allowedUnsafeSysctls (tests/security/conftest.py) lets a pod set kernel.msgmax, an
    unsafe sysctl of the pod's IPC namespace; the host's value stays."""
    host = Path("/proc/sys/kernel/msgmax").read_text().strip()
    want = "12345" if host != "12345" else "23456"
    pods.write_pod("tuned-ipc", {"securityContext": {"sysctls": [{"name": ALLOWED_UNSAFE_SYSCTL, "value": want}]},
                                 "containers": [sh(pods, "app", "cat /proc/sys/kernel/msgmax; sleep 3600")]})
    pods.wait_running("tuned-ipc")
    assert logs(pods, "tuned-ipc", "app") == want
    assert Path("/proc/sys/kernel/msgmax").read_text().strip() == host


def test_a_cluster_first_pod_gets_the_cluster_dns_and_domain(pods):
    """clusterDNS and clusterDomain (tests/security/conftest.py): a pod of dnsPolicy ClusterFirst
    (the default) asks the cluster's DNS service and searches its namespace's domains first,
    then the node's (its resolvConf), with ndots 5."""
    pods.write_pod("cluster-dns", {"containers": [sh(pods, "app", "cat /etc/resolv.conf; sleep 3600")]})
    pods.wait_running("cluster-dns")
    conf = wait_for(lambda: (o := logs(pods, "cluster-dns", "app")) and "options" in o and o, 20, "the resolv.conf")
    lines = [line.split() for line in conf.splitlines() if line.strip()]
    assert ["nameserver", CLUSTER_DNS] in lines and [line for line in lines if line[0] == "nameserver"] == [
        ["nameserver", CLUSTER_DNS]], conf
    assert ["search", f"default.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN, RESOLV_SEARCH] in lines, conf
    assert ["options", "ndots:5"] in lines, conf


def test_a_pod_with_a_forbidden_sysctl_is_refused(pods):
    pods.write_pod("tuned", {"securityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "4096"}]},
                             "containers": [sh(pods, "app", "sleep 3600")]})
    refused = pods.wait_pod("tuned", lambda p: p["phase"] == "Failed", 30, "the pod refused")
    assert refused["status"]["reason"] == "SysctlForbidden"
    assert refused["status"]["message"] == 'forbidden sysctl: "net.core.somaxconn" not whitelisted'
    assert not pods.sandboxes_of(refused["uid"]), "nothing was started"


def test_fs_group_owns_volume_files_and_is_a_supplemental_group(pods):
    pods.write_pod("grouped", {
        "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
        "volumes": [{"name": "scratch", "emptyDir": {}},
                    {"name": "info", "downwardAPI": {"defaultMode": 0o400, "items": [
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}],
        "containers": [sh(pods, "app", "id -G; touch /s/made; stat -c '%g %a' /s /s/made; "
                                       "stat -L -c '%g %a' /i/name; cat /i/name; echo; sleep 3600",
                          volumeMounts=[{"name": "scratch", "mountPath": "/s"},
                                        {"name": "info", "mountPath": "/i"}])]})
    pods.wait_running("grouped")
    out = wait_for(lambda: (o := logs(pods, "grouped", "app")) and o.count("\n") >= 4 and o, 20, "all output")
    groups, scratch, made, info, name = out.splitlines()[:5]
    assert "2000" in groups.split()
    assert scratch == "2000 2777", "the emptyDir belongs to the group, setgid"
    assert made.startswith("2000 "), "a file the container makes inherits the group"
    assert info == "2000 440", "a read-only volume's file: the group may read it, as with defaultMode 0400"
    assert name.startswith("grouped-"), "user 1000 reads it through the group"


def test_run_as_non_root_refuses_a_root_image_and_accepts_a_user(pods):
    # busybox's image names no user: it would run as root.
    pods.write_pod("rootless", {"securityContext": {"runAsNonRoot": True}, "containers": [
        sh(pods, "app", "sleep 3600")]})
    pods.write_pod("nonroot", {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}, "containers": [
        sh(pods, "app", "id -u; sleep 3600")]})
    refused = pods.wait_pod("rootless", lambda p: p["containers"][0]["reason"] == "CreateContainerConfigError", 30,
                            "runAsNonRoot refused with CreateContainerConfigError")
    message = refused["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert message.startswith("container has runAsNonRoot and image will run as root (pod: \"rootless-"), message
    assert not [c for c in pods.containers_of(refused["uid"]) if c.metadata.name == "app"], "nothing was created"
    pods.wait_running("nonroot")
