"""pykubelet on a newer production host: the bookworm guest booted with bookworm-backports' kernel
(6.12, the kernel of Debian 13), the node's containerd 2.x (deploy/build-containerd.sh's, in
/usr/local/bin where `pykubelet install` finds it before Debian's 1.6). There, user namespaced
pods run: containerd 2 makes them where the kernel can mount every filesystem a pod uses ID-mapped
(tmpfs included, Linux 6.3 and newer). On bookworm's own kernel and containerd the same pod is
held with the runtime's words (test_production_host.py)."""

from __future__ import annotations

import json

from bench.containerd2 import BIN as CONTAINERD_BIN
from bench.containerd2 import TOOLS as CONTAINERD_TOOLS
from tests.guest_node import MANIFESTS, PY, ROOT_DIR, install_args, push_images, running_pod, write_static_pod
from tests.integration.conftest import wait_for
from tests.vm.guest import BUSYBOX, POD_TIMEOUT, USERNS, read, units_active


def _kernel_release(vm) -> tuple[int, int]:
    major, minor = vm.run("uname", "-r").stdout.strip().split(".")[:2]
    return int(major), int(minor)


IDS_PER_POD = 2 * 65536  # userNamespaces.idsPerPod: twice the kubelet's default


def test_a_pod_with_host_users_false_runs_in_a_user_namespace(vm_backports_kernel):
    """Root in the pod is the first ID of the block of userNamespaces.idsPerPod IDs the node gave
    it (recorded in the pod's userns file, as the kubelet records it); its emptyDir is mounted
    ID-mapped, so what pod root writes is root's on the node's disk; the pod's processes run as
    that block's IDs on the node; a container with procMount Unmasked sees /proc whole, its sibling
    the kubelet's masked and read-only paths; the IDs are freed with the pod."""
    vm = vm_backports_kernel
    assert _kernel_release(vm) >= (6, 3), vm.run("uname", "-r").stdout
    missing = [str(CONTAINERD_BIN / t) for t in CONTAINERD_TOOLS if not (CONTAINERD_BIN / t).exists()]
    assert not missing, f"containerd 2 is not built ({', '.join(missing)}): `make test-vm` builds it with " \
                        "deploy/build-containerd.sh"
    for tool in CONTAINERD_TOOLS:
        vm.copy_in(CONTAINERD_BIN / tool, f"/usr/local/bin/{tool}")
    push_images(vm, timeout=300)
    vm.run(*install_args("pykubelet-vm", "10.0.2.15", "--enable"), timeout=300)
    vm.run("sh", "-c", "cat >> /etc/pykubelet/config.yaml", input=f"userNamespaces:\n  idsPerPod: {IDS_PER_POD}\n")
    unit = vm.run("systemctl", "cat", "pykubelet-containerd.service").stdout
    assert "ExecStart=/usr/local/bin/containerd " in unit, unit
    vm.run("systemctl", "start", "pykubelet.target", timeout=900)
    assert not units_active(vm), vm.run("systemctl", "status", "--no-pager", "-n", "20", *units_active(vm),
                                         check=False).stdout
    assert vm.run(PY, "-c", USERNS).stdout.strip() == "True", "containerd 2 on Linux 6.12 makes user namespaces"

    data_mount = [{"name": "data", "mountPath": "/data"}]
    write_static_pod(vm, "userns", {"hostUsers": False, "terminationGracePeriodSeconds": 0, "containers": [
        {"name": "app", "image": BUSYBOX, "volumeMounts": data_mount,
         "command": ["sh", "-c", "mount | grep /proc > /data/proc-default; "
                                 "cat /proc/self/uid_map > /data/uid_map; id -u > /data/me; sleep 3600"]},
        # The e2e_node spec "ProcMount will unmask proc mounts if requested" looks at the same.
        {"name": "unmasked", "image": BUSYBOX, "volumeMounts": data_mount, "securityContext": {"procMount": "Unmasked"},
         "command": ["sh", "-c", "mount | grep /proc > /data/proc-unmasked.tmp; "
                                 "mv /data/proc-unmasked.tmp /data/proc-unmasked; sleep 3600"]}],
        "volumes": [{"name": "data", "emptyDir": {}}]})
    try:
        pod = wait_for(lambda: running_pod(vm, "userns"), POD_TIMEOUT, "the pod in its user namespace", interval=5)
    except AssertionError:
        journal = vm.run("journalctl", "-u", "pykubelet-pod-sync", "--no-pager", "-n", "40", check=False).stdout
        raise AssertionError(f"the userns pod did not run; pod-sync's journal:\n{journal}") from None
    pod_dir = f"{ROOT_DIR}/pods/{pod['uid']}"
    [mapping] = json.loads(read(vm, f"{pod_dir}/userns"))["uidMappings"]
    assert mapping["containerId"] == 0 and mapping["length"] == IDS_PER_POD, mapping
    assert mapping["hostId"] >= IDS_PER_POD and mapping["hostId"] % IDS_PER_POD == 0, mapping
    data = f"{pod_dir}/volumes/kubernetes.io~empty-dir/data"
    wait_for(lambda: vm.run("test", "-s", f"{data}/me", check=False).returncode == 0, 30, "the pod's files")
    assert read(vm, f"{data}/uid_map").split() == ["0", str(mapping["hostId"]), str(IDS_PER_POD)]
    assert read(vm, f"{data}/me") == "0", "root inside the pod"
    assert vm.run("stat", "-c", "%u", f"{data}/me").stdout.strip() == "0", "root's on the node's disk (ID-mapped)"
    # procMount: Default hides and write-protects the kubelet's /proc and /sys paths (mounts over
    # them, read-only); Unmasked leaves /proc as the one mount the user namespace made.
    wait_for(lambda: vm.run("test", "-s", f"{data}/proc-unmasked", check=False).returncode == 0, 30,
             "the unmasked container's /proc mounts")
    default, unmasked = read(vm, f"{data}/proc-default"), read(vm, f"{data}/proc-unmasked")
    assert len(default.splitlines()) > 1 and "(ro" in default, default
    assert len(unmasked.splitlines()) == 1 and "(ro" not in unmasked, unmasked
    processes = vm.run("sh", "-c", "ps -o uid= -C sleep").stdout.split()
    assert str(mapping["hostId"]) in processes, f"the pod's root is {mapping['hostId']} on the node: {processes}"
    print(f"userns pod on {vm.run('uname', '-r').stdout.strip()}: pod root is {mapping['hostId']} on the node")

    vm.run("rm", f"{MANIFESTS}/userns.yaml")
    wait_for(lambda: vm.run("test", "-e", f"{pod_dir}/userns", check=False).returncode != 0, POD_TIMEOUT,
             "the pod's user namespace IDs freed", interval=5)
