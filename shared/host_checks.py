"""What the kubelet checks of the host before it starts, per its configuration: swap
(failSwapOn), the kernel tunables it relies on (protectKernelDefaults), the cgroup version
(failCgroupV1) and the CPUs the static CPU manager reserves (cpuManagerPolicy). A problem stops the node's start with the kubelet's words for it."""

from __future__ import annotations

from pathlib import Path

from shared.config import KubeletConfiguration
from shared.cpusets import online_cpus, static_policy_problem
from shared.node_resources import Reservations

# The kernel tunables the kubelet expects (its setupKernelTunables), by /proc/sys path.
KERNEL_DEFAULTS = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}


def swap_on(proc: Path) -> bool:
    """Is any swap area active? /proc/swaps has a header line, then one line per area; no file
    (a kernel without swap) means none."""
    try:
        lines = (proc / "swaps").read_text().splitlines()
    except FileNotFoundError:
        return False
    return any(line.strip() for line in lines[1:])


def kernel_tunable_problems(proc: Path) -> list[str]:
    """Each tunable that differs from what the kubelet expects, worded as the kubelet does."""
    problems = []
    for name, expected in KERNEL_DEFAULTS.items():
        flag = name.replace("/", ".")
        try:
            actual = int((proc / "sys" / name).read_text().strip())
        except (OSError, ValueError) as exc:
            problems.append(f"cannot read kernel flag {flag}: {exc}")
            continue
        if actual != expected:
            problems.append(f"invalid kernel flag: {flag}, expected value: {expected}, actual value: {actual}")
    return problems


def startup_problems(k: KubeletConfiguration, proc: Path = Path("/proc"),
                     cgroup_root: Path = Path("/sys/fs/cgroup"), cpus: frozenset[int] | None = None) -> list[str]:
    """Why the node must not start on this host with this configuration (empty: it may)."""
    problems = []
    cpus = online_cpus() if cpus is None else cpus
    if k.fail_swap_on and swap_on(proc):
        problems.append("running with swap on is not supported, please disable swap or set failSwapOn "
                        "(--fail-swap-on) to false")
    if k.protect_kernel_defaults:
        problems += [f"protectKernelDefaults: {p}" for p in kernel_tunable_problems(proc)]
    if k.cpu_manager_policy == "static":
        problem = static_policy_problem(k.reserved_system_cpus, Reservations.from_config(k).reserved_amount("cpu"),
                                        cpus)
        if problem:
            problems.append(problem)
    if k.fail_cgroup_v1 and not (cgroup_root / "cgroup.controllers").exists():
        problems.append("failCgroupV1: this host runs cgroup v1; boot it with cgroup v2 "
                        "(systemd.unified_cgroup_hierarchy=1) or set failCgroupV1 to false")
    return problems
