"""failSwapOn, protectKernelDefaults, failCgroupV1 and singleProcessOOMKill: what the node checks of its host before
it starts (shared/host/checks.py), on a /proc and a cgroup root made for each case."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config.settings import load_kubelet_config
from shared.host.checks import KERNEL_DEFAULTS, startup_problems

HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"


def host(tmp_path: Path, swaps: str | None = HEADER, tunables: dict[str, int] | None = None,
         cgroup_v2: bool = True) -> tuple[Path, Path]:
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    cgroup.mkdir()
    if swaps is not None:
        (proc / "swaps").write_text(swaps)
    for name, value in {**KERNEL_DEFAULTS, **(tunables or {})}.items():
        path = proc / "sys" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
    if cgroup_v2:
        (cgroup / "cgroup.controllers").write_text("cpu memory pids\n")
    return proc, cgroup


def problems(config: dict, proc: Path, cgroup: Path) -> list[str]:
    return startup_problems(load_kubelet_config(config)[0], proc, cgroup)


def test_a_host_as_the_kubelet_wants_it_starts(tmp_path):
    proc, cgroup = host(tmp_path)
    assert problems({"protectKernelDefaults": True, "failCgroupV1": True}, proc, cgroup) == []


def test_swap_on_stops_the_start_unless_fail_swap_on_is_false(tmp_path):
    proc, cgroup = host(tmp_path, swaps=HEADER + "/swapfile\tfile\t1048572\t0\t-2\n")
    assert problems({}, proc, cgroup) == [
        "running with swap on is not supported, please disable swap or set failSwapOn (--fail-swap-on) to false"]
    assert problems({"failSwapOn": False}, proc, cgroup) == []


@pytest.mark.parametrize("swaps", [HEADER, None])
def test_no_swap_area_or_no_swap_in_the_kernel_is_swap_off(tmp_path, swaps):
    proc, cgroup = host(tmp_path, swaps=swaps)
    assert problems({}, proc, cgroup) == []


def test_protect_kernel_defaults_names_each_tunable_that_differs(tmp_path):
    proc, cgroup = host(tmp_path, tunables={"vm/overcommit_memory": 0, "kernel/panic": 1})
    assert problems({}, proc, cgroup) == [], "off by default: the tunables are not looked at"
    assert problems({"protectKernelDefaults": True}, proc, cgroup) == [
        "protectKernelDefaults: invalid kernel flag: vm.overcommit_memory, expected value: 1, actual value: 0",
        "protectKernelDefaults: invalid kernel flag: kernel.panic, expected value: 10, actual value: 1"]


def test_fail_cgroup_v1_stops_the_start_on_a_cgroup_v1_host(tmp_path):
    proc, cgroup = host(tmp_path, cgroup_v2=False)
    assert problems({}, proc, cgroup) == [], "pykubelet runs on cgroup v1 unless told not to"
    assert problems({"failCgroupV1": True}, proc, cgroup) == [
        "failCgroupV1: this host runs cgroup v1; boot it with cgroup v2 (systemd.unified_cgroup_hierarchy=1) "
        "or set failCgroupV1 to false"]


def test_the_systemd_cgroup_driver_needs_systemd_on_either_cgroup_version(tmp_path):
    proc, cgroup = host(tmp_path)
    run = tmp_path / "run"
    config = load_kubelet_config({"cgroupDriver": "systemd"})[0]
    assert startup_problems(config, proc, cgroup, run=run) == [
        "cgroupDriver: systemd needs systemd as the init system and this host does not run it "
        "(no /run/systemd/system): set cgroupDriver to cgroupfs"]
    (run / "systemd" / "system").mkdir(parents=True)
    assert startup_problems(config, proc, cgroup, run=run) == []
    (cgroup / "cgroup.controllers").unlink()
    assert startup_problems(config, proc, cgroup, run=run) == [], "cgroup v1: systemd's legacy layout"
    assert startup_problems(load_kubelet_config({})[0], proc, cgroup, run=tmp_path / "none") == []


RESERVED = {"enforceNodeAllocatable": ["pods", "system-reserved", "kube-reserved"],
            "systemReservedCgroup": "/system.slice", "systemReserved": {"cpu": "100m", "pid": "1000"},
            "kubeReservedCgroup": "/kube/reserved", "kubeReserved": {"memory": "64Mi"}}


@pytest.mark.parametrize("v2", [True, False])
def test_a_reserved_cgroup_that_does_not_exist_stops_the_start(tmp_path, v2):
    """As the kubelet: each enforced reservation's cgroup must exist, in every cgroup v1
    hierarchy its limits go to."""
    proc, cgroup = host(tmp_path, cgroup_v2=v2)
    made = ["system.slice", "kube/reserved"] if v2 else ["cpu/system.slice", "pids/system.slice", "memory/kube/reserved"]
    for rel in made[1:]:
        (cgroup / rel).mkdir(parents=True)
    missing = cgroup / made[0]
    assert problems(RESERVED, proc, cgroup) == [
        'failed to enforce System Reserved Cgroup Limits on "/system.slice": "/system.slice" cgroup does not exist '
        f"(no {missing}); create it, or take system-reserved out of enforceNodeAllocatable"]
    missing.mkdir(parents=True)
    assert problems(RESERVED, proc, cgroup) == []
    assert problems({**RESERVED, "enforceNodeAllocatable": ["pods"]}, tmp_path / "x", tmp_path / "y") == []


def test_an_enforced_reservation_that_reserves_nothing_stops_the_start(tmp_path):
    proc, cgroup = host(tmp_path)
    (cgroup / "kube").mkdir()
    assert problems({"enforceNodeAllocatable": ["kube-reserved"], "kubeReservedCgroup": "/kube"}, proc, cgroup) == [
        'failed to enforce Kube Reserved Cgroup Limits on "/kube": "/kube" cgroup is not configured properly: '
        "kubeReserved reserves no cpu, memory or pid; reserve some or take kube-reserved out of enforceNodeAllocatable"]


@pytest.mark.parametrize("v2", [True, False])
def test_a_cgroup_root_that_does_not_exist_stops_the_start(tmp_path, v2):
    """cgroupRoot must exist in every hierarchy the pods use (v1: those mounted), as the kubelet
    checks; the default root always does."""
    proc, cgroup = host(tmp_path, cgroup_v2=v2)
    hierarchies = [cgroup] if v2 else [cgroup / c for c in ("cpu", "cpuacct", "memory", "pids")]
    for h in hierarchies[:-1]:
        (h / "custom/nodes").mkdir(parents=True)
    if not v2:
        hierarchies[-1].mkdir()
    missing = hierarchies[-1] / "custom/nodes"
    assert problems({"cgroupRoot": "/custom/nodes"}, proc, cgroup) == [
        f'invalid configuration: cgroup-root "/custom/nodes" has some missing paths: {missing}; create it, or '
        "leave cgroupRoot (--cgroup-root) unset"]
    missing.mkdir(parents=True)
    assert problems({"cgroupRoot": "/custom/nodes"}, proc, cgroup) == []
    assert problems({"cgroupRoot": "/"}, proc, cgroup) == []


def test_the_nodes_pid_capacity_is_the_lesser_of_pid_max_and_threads_max(tmp_path):
    from shared.host.facts import task_max

    (tmp_path / "sys/kernel").mkdir(parents=True)
    assert task_max(tmp_path) is None
    (tmp_path / "sys/kernel/pid_max").write_text("4194304\n")
    assert task_max(tmp_path) == 4194304
    (tmp_path / "sys/kernel/threads-max").write_text("23676\n")
    assert task_max(tmp_path) == 23676


def test_single_process_oom_kill_false_is_refused_on_cgroup_v1_only(tmp_path):
    (tmp_path / "v1").mkdir()
    v1 = host(tmp_path / "v1", cgroup_v2=False)
    assert problems({"singleProcessOOMKill": False}, *v1) == [
        "invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1"]
    assert problems({"singleProcessOOMKill": True}, *v1) == [] and problems({}, *v1) == []
    (tmp_path / "v2").mkdir()
    assert problems({"singleProcessOOMKill": False}, *host(tmp_path / "v2")) == []
