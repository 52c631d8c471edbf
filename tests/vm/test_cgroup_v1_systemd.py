"""The systemd cgroup driver on cgroup v1: the Debian guest booted with systemd's legacy layout
(systemd.unified_cgroup_hierarchy=0: a tree per controller, as hosts from before cgroup v2 run).
`pykubelet install --cgroup-driver systemd` sets the node up with it; the pods, the QoS tiers
and node allocatable are slices whose limits systemd writes into the cpu, memory and pids trees
from the legacy properties; and each value is the one the kubelet 1.37 sets in the same guest
(told failCgroupV1: false, as it refuses v1 otherwise)."""

from __future__ import annotations

from shared.model.cgroup_names import container_cgroup, on_host, slice_unit
from shared.process.admin import SERVICES
from tests.guest_node import PY, install_args, push_images, running_pod, web_spec, write_static_pod
from tests.integration.conftest import wait_for
from tests.vm.guest import (
    DRIVER,
    POD_PIDS_LIMIT,
    POD_TIMEOUT,
    compare_with_kubelet,
    pod_name,
    read,
    service_pid,
    unit_property,
    units_active,
)


def _cgroup(controller: str, pod: dict) -> str:
    return f"/sys/fs/cgroup/{controller}" + on_host(pod_name(pod), "systemd")


def _mem_total(vm) -> int:
    return next(int(line.split()[1]) * 1024 for line in vm.run("cat", "/proc/meminfo").stdout.splitlines()
                if line.startswith("MemTotal:"))


def test_install_brings_the_node_up_with_the_systemd_driver_on_cgroup_v1(vm_cgroup_v1):
    vm = vm_cgroup_v1
    assert vm.run("stat", "-fc", "%T", "/sys/fs/cgroup").stdout.strip() == "tmpfs", "the legacy layout"
    assert vm.run("stat", "-fc", "%T", "/sys/fs/cgroup/memory").stdout.strip() == "cgroupfs"
    assert vm.run("ps", "-o", "comm=", "-p", "1").stdout.strip() == "systemd"

    push_images(vm, timeout=300)
    vm.run(*install_args("pykubelet-vm", "10.0.2.15", "--enable", "--cgroup-driver", "systemd"), timeout=300)
    assert "cgroupDriver: systemd" in read(vm, "/etc/pykubelet/config.yaml")
    assert "SystemdCgroup = true" in read(vm, "/var/lib/pykubelet/containerd/config.toml")
    write_static_pod(vm, "web", web_spec())
    vm.run("systemctl", "start", "pykubelet.target", timeout=900)
    assert not units_active(vm), vm.run("systemctl", "status", "--no-pager", "-n", "20", *units_active(vm),
                                        check=False).stdout
    pod = wait_for(lambda: running_pod(vm, "web"), POD_TIMEOUT, "the web pod Running", interval=5)
    assert "pykubelet" in vm.run("busybox", "wget", "-qO-", f"http://{pod['podIP']}/").stdout
    assert vm.run(PY, "-c", DRIVER).stdout.strip() == "systemd"
    # Each service forked from the preload unit, in its own unit's cgroup of every hierarchy.
    preload = unit_property(vm, "pykubelet-preload.service", "MainPID")
    for service in SERVICES:
        unit = f"pykubelet-{service}.service"
        pid = service_pid(vm, unit)
        ppid = vm.run("ps", "-o", "ppid=", "-p", pid).stdout.strip()
        assert ppid == preload, vm.run("journalctl", "--no-pager", "-o", "cat", "-n", "40", "-u", unit).stdout
        cgroups = read(vm, f"/proc/{pid}/cgroup").splitlines()
        assert f"1:name=systemd:/pykubelet.slice/{unit}" in cgroups, cgroups
    # The pod is a slice of systemd's in each controller's tree, its container a scope in it.
    assert unit_property(vm, slice_unit(pod_name(pod)), "ActiveState") == "active"
    container_id = pod["containers"][0]["containerID"].removeprefix("containerd://")
    for controller in ("cpu", "memory", "pids"):
        scope = container_cgroup(_cgroup(controller, pod), container_id)
        assert vm.run("test", "-d", scope, check=False).returncode == 0, scope
    # Node allocatable (enforceNodeAllocatable: pods, no reservations): the node's memory, as
    # the legacy MemoryLimit, which systemd keeps through a daemon-reload.
    vm.run("systemctl", "daemon-reload")
    assert read(vm, "/sys/fs/cgroup/memory/kubepods.slice/memory.limit_in_bytes") == str(_mem_total(vm))
    assert unit_property(vm, "kubepods.slice", "MemoryLimit") == str(_mem_total(vm))


def test_the_kubelet_1_37_sets_the_cgroups_pykubelet_sets_on_cgroup_v1(vm_cgroup_v1):
    """A Guaranteed, a Burstable spinner asking for 1500m and a BestEffort spinner, under
    pykubelet, then under the kubelet 1.37 on the same containerd 2.x (tests/vm/guest.py): the
    cpu, memory and pids files of the pods' slices, their containers' scopes, the tiers and
    kubepods.slice are the same, and the Burstable spinner takes at least 90% of the CPU."""
    vm = vm_cgroup_v1
    cmp = compare_with_kubelet(vm, baseline_config="failCgroupV1: false\n")
    print(cmp.table())
    print(cmp.shapes())
    assert not cmp.summary_fields_only_ours(), f"fields the kubelet 1.37 has not: {cmp.summary_fields_only_ours()}"
    assert not cmp.differ(), f"pykubelet and the kubelet 1.37 differ (pykubelet, kubelet): {cmp.differ()}"
    ours = cmp.ours
    # The tiers in shares, exactly: the minimum for BestEffort, the requests for Burstable.
    assert (ours["tier/besteffort/cpu.shares"], ours["tier/burstable/cpu.shares"]) == ("2", "1536")
    for level in ("pod", "container"):
        assert ours[f"{level}/cmp-guaranteed/cpu.cfs_quota_us"] == "20000", level
        assert ours[f"{level}/cmp-guaranteed/memory.limit_in_bytes"] == str(64 * 2**20), level
        assert ours[f"{level}/cmp-burstable/memory.limit_in_bytes"] == str(256 * 2**20), level
    assert ours["pod/cmp-guaranteed/pids.max"] == str(POD_PIDS_LIMIT)
    assert ours["kubepods/memory.limit_in_bytes"] == str(_mem_total(vm))
    assert cmp.our_share >= 0.9, f"the Burstable spinner took {cmp.our_share:.1%} of the CPU"
    wait_for(lambda: running_pod(vm, "web"), POD_TIMEOUT, "the web pod Running again under pykubelet", interval=5)
