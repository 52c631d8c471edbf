"""Privileged pods and mount propagation on real containers, as the node's own infrastructure
(CNI agents, CSI node plugins, monitoring) needs them: a privileged container has every
capability, the host's devices and an unmasked /proc; a plain one has none of that; and mounts
made in a Bidirectional volume reach the host and the HostToContainer pods, never the private ones
(the upstream e2e "Mount propagation" spec's scopes)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from shared.host.mounts import is_mount_point, unmount_all_under
from tests.integration.conftest import wait_for


def own_capabilities() -> str:
    """Every capability root has here: what a privileged container (or `add: [ALL]`) gets from
    the runtime, which gives the capabilities it holds itself (these VMs' root lacks SYS_RESOURCE)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return line.split()[1]
    pytest.fail("no CapEff in /proc/self/status")


ALL_CAPS = own_capabilities()
# containerd's default set (the kubelet adds none): CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID
# SETUID SETPCAP NET_BIND_SERVICE NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP.
DEFAULT_CAPS = "00000000a80425fb"
NET_ADMIN = format(1 << 12, "016x")


def sh(node, name, script, **extra):
    return {"name": name, "image": node.image("busybox"), "command": ["sh", "-c", script], **extra}


def output(node, pod: str, container: str, lines: int) -> list[str]:
    def enough():
        out = node.cli("logs", pod, "-c", container).stdout
        return out.count("\n") >= lines and out.splitlines()
    return wait_for(enough, 30, f"{lines} lines from {pod}/{container}")


def host_block_device() -> str:
    for name in sorted(os.listdir("/dev")):
        if stat.S_ISBLK(os.lstat(f"/dev/{name}").st_mode):
            return name
    pytest.fail("this host has no block device in /dev to look for from a privileged container")


# What a container can do and see: its effective capabilities, whether it may mount, whether it
# sees a host block device, whether /proc/timer_list is masked, whether /proc/sys is writable,
# and whether the kernel keeps it from gaining privileges.
PROBE = ("grep CapEff /proc/self/status | cut -f2; "
         "mkdir -p /tmp/m; mount -t tmpfs probe /tmp/m 2>/dev/null && echo can-mount || echo no-mount; "
         "test -b /dev/{dev} && echo sees-{dev} || echo no-{dev}; "
         "head -c 4 /proc/timer_list | grep -q . && echo timer-list || echo masked; "
         "(echo 1 > /proc/sys/net/ipv4/ip_forward) 2>/dev/null && echo sys-writable || echo sys-read-only; "
         "grep NoNewPrivs /proc/self/status | cut -f2; sleep 3600")


def test_a_privileged_container_has_every_capability_the_hosts_devices_and_an_unmasked_proc(pods):
    dev = host_block_device()
    probe = PROBE.format(dev=dev)
    pods.write_pod("privileged", {"containers": [
        sh(pods, "app", probe, securityContext={"privileged": True}),
        sh(pods, "plain", probe)]})
    pods.write_pod("escalation", {"containers": [
        sh(pods, "denied", probe, securityContext={"allowPrivilegeEscalation": False}),
        sh(pods, "allowed", probe, securityContext={"allowPrivilegeEscalation": True})]})
    pods.wait_running("privileged")
    pods.wait_running("escalation")
    assert output(pods, "privileged", "app", 6) == [ALL_CAPS, "can-mount", f"sees-{dev}", "timer-list",
                                                    "sys-writable", "0"]
    # Beside it in the same (privileged) sandbox, a container that did not ask for it has none of it.
    assert output(pods, "privileged", "plain", 6) == [DEFAULT_CAPS, "no-mount", f"no-{dev}", "masked",
                                                      "sys-read-only", "0"]
    assert output(pods, "escalation", "denied", 6)[5] == "1", "allowPrivilegeEscalation: false sets no_new_privs"
    assert output(pods, "escalation", "allowed", 6)[5] == "0"


def test_capabilities_added_and_dropped_including_all(pods):
    probe = "grep CapEff /proc/self/status | cut -f2; sleep 3600"
    pods.write_pod("capabilities", {"containers": [
        sh(pods, "none", probe, securityContext={"capabilities": {"drop": ["ALL"]}}),
        sh(pods, "only-net-admin", probe, securityContext={"capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}),
        sh(pods, "all", probe, securityContext={"capabilities": {"add": ["ALL"]}})]})
    pods.wait_running("capabilities")
    assert output(pods, "capabilities", "none", 1) == ["0000000000000000"]
    assert output(pods, "capabilities", "only-net-admin", 1) == [NET_ADMIN]
    assert output(pods, "capabilities", "all", 1) == [ALL_CAPS]


def test_a_privileged_pod_in_the_hosts_namespaces_sees_the_host(pods):
    host_ns = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("net", "pid", "ipc")}
    env = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"status.{field}"}}}
           for name, field in (("POD_IP", "podIP"), ("HOST_IP", "hostIP"))]
    pods.write_pod("host-agent", {"hostNetwork": True, "hostPID": True, "hostIPC": True, "containers": [
        sh(pods, "agent", "for k in net pid ipc; do readlink /proc/self/ns/$k; done; "
                          "mkdir -p /tmp/m; mount -t tmpfs probe /tmp/m && echo can-mount; "
                          "echo pod-ip=$POD_IP host-ip=$HOST_IP; sleep 3600",
           securityContext={"privileged": True}, env=env)]})
    running = pods.wait_running("host-agent")
    out = output(pods, "host-agent", "agent", 5)
    assert out[:4] == [host_ns["net"], host_ns["pid"], host_ns["ipc"], "can-mount"]
    # A hostNetwork pod's IP is the node's, in its status and its downward API (as the kubelet's).
    assert running["podIP"] and out[4] == f"pod-ip={running['podIP']} host-ip={running['podIP']}", (out, running)


NAMES = ("master", "slave", "private", "default")


def propagation_pod(node, shared: Path, name: str, propagation: str | None) -> dict:
    """The e2e spec's pod: privileged, the shared directory at /mnt/test with `propagation`. Once
    the host says start (every pod's container has its mounts by then, so none copies another's
    mount when it is made), it mounts a tmpfs of its own at /mnt/test/<name>; once the host says
    go, it prints what it sees of every mount there."""
    mount = {"name": "test", "mountPath": "/mnt/test", **({"mountPropagation": propagation} if propagation else {})}
    script = ("i=0; until [ -e /mnt/test/start ] || [ $i -gt 600 ]; do sleep 0.1; i=$((i+1)); done; "
              f"mkdir -p /mnt/test/{name}; mount -t tmpfs e2e-{name} /mnt/test/{name}; "
              f"echo {name} > /mnt/test/{name}/file; touch /mnt/test/ready-{name}; "
              "i=0; until [ -e /mnt/test/go ] || [ $i -gt 600 ]; do sleep 0.1; i=$((i+1)); done; "
              f"for d in {' '.join(NAMES)} host; do cat /mnt/test/$d/file 2>/dev/null || echo -; done; sleep 3600")
    return {"volumes": [{"name": "test", "hostPath": {"path": str(shared),
                                                       "type": "DirectoryOrCreate"}}],
            "terminationGracePeriodSeconds": 1,
            "containers": [sh(node, "cntr", script, securityContext={"privileged": True}, volumeMounts=[mount])]}


def test_mounts_propagate_within_the_scopes_each_pod_asked_for(pods):
    shared = pods.root / "mount-propagation"
    try:
        for name, propagation in zip(NAMES, ("Bidirectional", "HostToContainer", "None", None), strict=True):
            pods.write_pod(f"mp-{name}", propagation_pod(pods, shared, name, propagation))
        for name in NAMES:
            pods.wait_running(f"mp-{name}")
        (shared / "start").touch()
        wait_for(lambda: all((shared / f"ready-{n}").exists() for n in NAMES), 30, "every pod's own mount")
        (shared / "host").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "e2e-host", str(shared / "host")], check=True, timeout=30)
        (shared / "host" / "file").write_text("host\n")
        (shared / "go").touch()
        seen = {name: dict(zip([*NAMES, "host"], output(pods, f"mp-{name}", "cntr", 5)[:5], strict=True)) for name in NAMES}
        visible = {name: {d for d, content in got.items() if content == d} for name, got in seen.items()}
        assert visible == {"master": {"master", "host"},
                           "slave": {"master", "slave", "host"},
                           "private": {"private"},
                           "default": {"default"}}, seen
        # The Bidirectional pod's mount reached the host (where a CSI plugin's volume must be).
        assert is_mount_point(shared / "master") and (shared / "master" / "file").read_text() == "master\n"
        assert not any(is_mount_point(shared / n) for n in ("slave", "private", "default"))
    finally:
        # What propagated to the host stays there after the pods go (as on the kubelet's node).
        assert not unmount_all_under(shared), "unmounting the propagation test's mounts"
