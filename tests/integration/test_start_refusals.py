"""The host checks of the kubelet, on this host, with the real `pykubelet up`: swap
(failSwapOn), the kernel tunables (protectKernelDefaults), the cgroup version (failCgroupV1) and
the memory manager's reservation (reservedMemory), the cgroups of enforced reservations
(systemReservedCgroup). A refusal names what is wrong, in the
kubelet's words, and nothing of the node is made: not its root dir, not a process.

The host is changed only for the length of one start, and put back: a swap file switched on,
one kernel tunable set to another value."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shared.host.checks import KERNEL_DEFAULTS
from tests.integration.conftest import PYKUBELET, REPO

HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
CGROUP_V1 = not Path("/sys/fs/cgroup/cgroup.controllers").exists()


def start(tmp_path: Path, config: str) -> subprocess.CompletedProcess:
    """`pykubelet up` with this configuration; the start must be refused (exit 2) before the
    root dir exists."""
    conf = tmp_path / "kubelet-config.yaml"
    conf.write_text(HEADER + config)
    root = tmp_path / "root"
    res = subprocess.run([*PYKUBELET, "up", "--config", str(conf), "--root-dir", str(root)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 2, f"pykubelet up was not refused ({res.returncode}): {res.stderr[-2000:]}"
    assert not root.exists(), "a refused start made the node's root dir"
    return res


def host_is_cgroup_v1() -> None:
    if not CGROUP_V1:
        pytest.fail("these start checks run on a cgroup v1 host (failCgroupV1 refuses the start there, "
                    "and the test relies on that to stop each start); the cgroup v2 host is tests/vm")


@pytest.fixture
def swap_file():
    """A 16 MiB swap file, on for the test."""
    path = Path("/var/tmp/pykubelet-test.swap")
    subprocess.run(["fallocate", "-l", "16M", str(path)], check=True, timeout=30)
    path.chmod(0o600)
    subprocess.run(["mkswap", str(path)], check=True, capture_output=True, timeout=30)
    on = subprocess.run(["swapon", str(path)], capture_output=True, text=True, timeout=30)
    if on.returncode != 0:
        path.unlink()
        pytest.fail(f"cannot switch on a swap file here ({on.stderr.strip()}): the swap checks need one")
    try:
        yield path
    finally:
        subprocess.run(["swapoff", str(path)], check=False, timeout=60)
        path.unlink(missing_ok=True)


def test_swap_on_refuses_the_start_unless_fail_swap_on_is_false(tmp_path, swap_file):
    host_is_cgroup_v1()
    assert str(swap_file) in Path("/proc/swaps").read_text()
    refused = start(tmp_path, "")  # failSwapOn: true, the kubelet's default
    assert "running with swap on is not supported, please disable swap or set failSwapOn" in refused.stderr
    # failSwapOn false: the swap is accepted; failCgroupV1 stops this start instead.
    refused = start(tmp_path, "failSwapOn: false\nfailCgroupV1: true\n")
    assert "swap" not in refused.stderr and "failCgroupV1: this host runs cgroup v1" in refused.stderr, refused.stderr


@pytest.fixture
def kernel_panic_zero():
    """kernel.panic at 0 (the kubelet wants 10) for the test, then as it was."""
    path = Path("/proc/sys/kernel/panic")
    before = path.read_text()
    path.write_text("0\n")
    try:
        yield
    finally:
        path.write_text(before)


def tunables_that_differ() -> list[str]:
    return [name.replace("/", ".") for name, want in KERNEL_DEFAULTS.items()
            if int(Path("/proc/sys", name).read_text()) != want]


def test_protect_kernel_defaults_names_each_tunable_that_differs(tmp_path, kernel_panic_zero):
    host_is_cgroup_v1()
    refused = start(tmp_path, "protectKernelDefaults: true\nfailCgroupV1: true\n")
    assert "protectKernelDefaults: invalid kernel flag: kernel.panic, expected value: 10, actual value: 0" \
        in refused.stderr, refused.stderr
    for name in tunables_that_differ():  # whatever else this host has otherwise
        assert f"invalid kernel flag: {name}," in refused.stderr
    # protectKernelDefaults false (the default): the tunables are not looked at.
    refused = start(tmp_path, "failCgroupV1: true\n")
    assert "kernel flag" not in refused.stderr and "failCgroupV1" in refused.stderr, refused.stderr


def test_fail_cgroup_v1_refuses_the_start_on_this_cgroup_v1_host(tmp_path):
    host_is_cgroup_v1()
    refused = start(tmp_path, "failCgroupV1: true\n")
    assert refused.stderr.strip().endswith(
        "not starting: failCgroupV1: this host runs cgroup v1; boot it with cgroup v2 "
        "(systemd.unified_cgroup_hierarchy=1) or set failCgroupV1 to false"), refused.stderr


def test_reserved_memory_must_be_the_nodes_memory_reservation(tmp_path):
    """The memory manager's Static policy: reservedMemory must add up to systemReserved +
    kubeReserved + evictionHard's memory.available (here 100Mi + 0 + the default 100Mi)."""
    host_is_cgroup_v1()
    refused = start(tmp_path, "memoryManagerPolicy: Static\nsystemReserved: {memory: 100Mi}\n"
                              "reservedMemory:\n- numaNode: 0\n  limits: {memory: 100Mi}\nfailCgroupV1: true\n")
    assert 'reservedMemory: the total amount "100Mi" of type "memory" is not equal to the value "200Mi" ' \
           "determined by Node Allocatable feature" in refused.stderr, refused.stderr
    refused = start(tmp_path, "memoryManagerPolicy: Static\nsystemReserved: {memory: 100Mi}\n"
                              "reservedMemory:\n- numaNode: 0\n  limits: {memory: 200Mi}\nfailCgroupV1: true\n")
    assert "reservedMemory" not in refused.stderr and "failCgroupV1" in refused.stderr, refused.stderr


def test_a_reserved_cgroup_that_does_not_exist_refuses_the_start(tmp_path):
    """enforceNodeAllocatable system-reserved: its cgroup must exist (the kubelet does not make
    it); once it does, that check passes."""
    host_is_cgroup_v1()
    cgroup = f"pykubelet-test-refusal-{tmp_path.name}"
    config = (f"enforceNodeAllocatable: [pods, system-reserved]\nsystemReservedCgroup: /{cgroup}\n"
              "systemReserved: {memory: 50Mi}\nfailCgroupV1: true\n")
    refused = start(tmp_path, config)
    assert (f'failed to enforce System Reserved Cgroup Limits on "/{cgroup}": "/{cgroup}" cgroup does not exist '
            f"(no /sys/fs/cgroup/memory/{cgroup}); create it, or take system-reserved out of "
            "enforceNodeAllocatable") in refused.stderr, refused.stderr
    made = Path("/sys/fs/cgroup/memory") / cgroup
    made.mkdir()
    try:
        refused = start(tmp_path, config)
    finally:
        made.rmdir()
    assert "System Reserved" not in refused.stderr and "failCgroupV1" in refused.stderr, refused.stderr


def test_a_cgroup_root_that_does_not_exist_refuses_the_start(tmp_path):
    """cgroupRoot must exist in every hierarchy the pods use, as the kubelet checks."""
    host_is_cgroup_v1()
    cgroup = f"pykubelet-test-root-{tmp_path.name}"
    refused = start(tmp_path, f"cgroupRoot: /{cgroup}\nfailCgroupV1: true\n")
    assert f'invalid configuration: cgroup-root "/{cgroup}" has some missing paths: /sys/fs/cgroup/cpu/{cgroup}' \
        in refused.stderr, refused.stderr
    assert "leave cgroupRoot (--cgroup-root) unset" in refused.stderr
    refused = start(tmp_path, "cgroupRoot: /a/../../etc\n")
    assert "cgroupRoot: '/a/../../etc' is not a cgroup path" in refused.stderr, refused.stderr


def test_a_feature_gate_other_than_the_kubelets_default_refuses_the_start_naming_it(tmp_path):
    """featureGates: each gate of the kubelet 1.37 at its default is accepted (the node behaves as
    the kubelet does with it); another value, in the file or with --feature-gates, is refused in
    the kubelet's words or with what pykubelet does instead."""
    host_is_cgroup_v1()
    refused = start(tmp_path, "featureGates:\n  AtomicWriteVolumeUserFields: true\n")
    assert "featureGates: AtomicWriteVolumeUserFields=true is not implemented by pykubelet (it runs with " \
           "AtomicWriteVolumeUserFields at the kubelet's default, false); remove it" in refused.stderr, refused.stderr
    refused = start(tmp_path, "featureGates:\n  InPlacePodVerticalScaling: false\n")
    assert "cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true" in refused.stderr
    conf = tmp_path / "kubelet-config.yaml"
    res = subprocess.run([*PYKUBELET, "up", "--config", str(conf), "--root-dir", str(tmp_path / "root"),
                          "--feature-gates=NoSuchGate=true"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 2 and "unrecognized feature gate: NoSuchGate" in res.stderr, res.stderr
    # At the kubelet's defaults: accepted; failCgroupV1 stops this start instead.
    refused = start(tmp_path, "featureGates:\n  InPlacePodVerticalScaling: true\n  AtomicWriteVolumeUserFields: false\n"
                              "failCgroupV1: true\n")
    assert "feature" not in refused.stderr and "failCgroupV1" in refused.stderr, refused.stderr
