"""What the kubelet checks of the host before it starts, per its configuration: swap
(failSwapOn), the kernel tunables it relies on (protectKernelDefaults), the cgroup version
(failCgroupV1) and the CPUs the static CPU manager reserves (cpuManagerPolicy). A problem stops the node's start with the kubelet's words for it."""

from __future__ import annotations

from pathlib import Path

from shared.config.settings import KubeletConfiguration
from shared.config.thresholds import hard_eviction_reservation
from shared.host.cpu_topology import numa_nodes, online_cpus, static_policy_problem
from shared.host.facts import memory_capacity_bytes
from shared.host.node_resources import Reservations, reserved_cgroups
from shared.host.swap import limited_swap_problem, node_swap
from shared.model.quantity import to_bytes

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


def _mebibytes(n: int) -> str:
    return f"{n // 2**20}Mi" if n % 2**20 == 0 else str(n)


def numa_problems(k: KubeletConfiguration, numa: frozenset[int], memory_bytes: int) -> list[str]:
    """The topology and memory managers are implemented for a single-NUMA host; reservedMemory
    must hold the node's memory reservation, as the kubelet's memory manager checks."""
    problems = []
    if len(numa) > 1:
        for name, value, default in (("topologyManagerPolicy", k.topology_manager_policy, "none"),
                                     ("topologyManagerScope", k.topology_manager_scope, "container"),
                                     ("memoryManagerPolicy", k.memory_manager_policy, "None")):
            if value != default:
                problems.append(f"{name} {value}: this host has {len(numa)} NUMA nodes and pykubelet aligns resources "
                                f"only on a host with one; set it to {default}")
    if k.memory_manager_policy != "Static":
        return problems
    for r in k.reserved_memory:
        if r.numa_node not in numa:
            problems.append(f"the reserved memory configuration references a NUMA node {r.numa_node} that does not "
                            "exist on this machine")
    res = Reservations.from_config(k)
    wanted = res.reserved_amount("memory") + hard_eviction_reservation(list(res.thresholds), memory_bytes, 0)["memory"]
    given = sum(to_bytes(r.limits.get("memory", 0)) for r in k.reserved_memory)
    if given != wanted:
        problems.append(f'reservedMemory: the total amount "{_mebibytes(given)}" of type "memory" is not equal to the '
                        f'value "{_mebibytes(wanted)}" determined by Node Allocatable feature (systemReserved + '
                        'kubeReserved + evictionHard memory.available)')
    return problems


def startup_problems(k: KubeletConfiguration, proc: Path = Path("/proc"),
                     cgroup_root: Path = Path("/sys/fs/cgroup"), cpus: frozenset[int] | None = None,
                     numa: frozenset[int] | None = None, memory_bytes: int | None = None,
                     run: Path = Path("/run")) -> list[str]:
    """Why the node must not start on this host with this configuration (empty: it may)."""
    problems = []
    cpus = online_cpus() if cpus is None else cpus
    if k.fail_swap_on and swap_on(proc):
        problems.append("running with swap on is not supported, please disable swap or set failSwapOn "
                        "(--fail-swap-on) to false")
    swap_problem = limited_swap_problem(node_swap(k.memory_swap.swap_behavior, cgroup_root, proc))
    if swap_problem:
        problems.append(swap_problem)
    if k.protect_kernel_defaults:
        problems += [f"protectKernelDefaults: {p}" for p in kernel_tunable_problems(proc)]
    if k.cpu_manager_policy == "static":
        problem = static_policy_problem(k.reserved_system_cpus, Reservations.from_config(k).reserved_amount("cpu"),
                                        cpus)
        if problem:
            problems.append(problem)
    problems += numa_problems(k, numa_nodes() if numa is None else numa,
                              memory_capacity_bytes() if memory_bytes is None else memory_bytes)
    cgroup_v1 = not (cgroup_root / "cgroup.controllers").exists()
    if k.fail_cgroup_v1 and cgroup_v1:
        problems.append("failCgroupV1: this host runs cgroup v1; boot it with cgroup v2 "
                        "(systemd.unified_cgroup_hierarchy=1) or set failCgroupV1 to false")
    if k.single_process_oom_kill is False and cgroup_v1:
        problems.append("invalid configuration: singleProcessOOMKill must not be explicitly set to false when "
                        "using cgroup v1")
    if k.cgroup_driver == "systemd":
        problems += systemd_driver_problems(cgroup_root, run)
    problems += cgroup_root_problems(k, cgroup_root)
    problems += reserved_cgroup_problems(k, cgroup_root)
    if (k.shutdown_grace_period or k.shutdown_grace_period_by_pod_priority) and not (run / "systemd" / "system").is_dir():
        field = "shutdownGracePeriod" if k.shutdown_grace_period else "shutdownGracePeriodByPodPriority"
        problems.append(f"{field}: a graceful node shutdown is announced by systemd-logind and this host does not "
                        f"run systemd (no {run}/systemd/system): remove {field}")
    return problems


# The v1 hierarchies the pods' cgroups are made in (by pod-sync or the runtime) below cgroupRoot.
_POD_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids")


def cgroup_root_problems(k: KubeletConfiguration, cgroup_root: Path = Path("/sys/fs/cgroup")) -> list[str]:
    """cgroupRoot must exist already in every hierarchy the pods use, as the kubelet checks."""
    rel = k.cgroup_root.strip("/")
    if not rel:
        return []
    if (cgroup_root / "cgroup.controllers").is_file():
        dirs = [cgroup_root / rel]
    else:
        dirs = [cgroup_root / c / rel for c in _POD_CONTROLLERS if (cgroup_root / c).is_dir()]
    missing = [str(d) for d in dirs if not d.is_dir()]
    if not missing:
        return []
    return [f'invalid configuration: cgroup-root "{k.cgroup_root}" has some missing paths: {", ".join(missing)}; '
            "create it, or leave cgroupRoot (--cgroup-root) unset"]


def reserved_cgroup_problems(k: KubeletConfiguration, cgroup_root: Path = Path("/sys/fs/cgroup")) -> list[str]:
    """enforceNodeAllocatable's system-reserved and kube-reserved need their cgroups to exist
    already and a reservation to enforce, as the kubelet checks at start (in its words)."""
    problems = []
    for r in reserved_cgroups(k):
        where = f'failed to enforce {r.title} Cgroup Limits on "{r.cgroup}"'
        if r.empty:
            problems.append(f'{where}: "{r.cgroup}" cgroup is not configured properly: {r.field} reserves no cpu, '
                            f"memory or pid; reserve some or take {r.key} out of enforceNodeAllocatable")
            continue
        dirs = dict.fromkeys(r.directory(cgroup_root, c) for c in r.v1_controllers())
        missing = [str(d) for d in dirs if not d.is_dir()]
        if missing:
            problems.append(f'{where}: "{r.cgroup}" cgroup does not exist (no {", ".join(missing)}); create it, or '
                            f"take {r.key} out of enforceNodeAllocatable")
    return problems


def systemd_driver_problems(cgroup_root: Path = Path("/sys/fs/cgroup"), run: Path = Path("/run")) -> list[str]:
    """cgroupDriver: systemd needs systemd as the init system (on cgroup v2, or v1 in systemd's
    legacy or hybrid layout)."""
    if not (run / "systemd" / "system").is_dir():
        return ["cgroupDriver: systemd needs systemd as the init system and this host does not run it "
                "(no /run/systemd/system): set cgroupDriver to cgroupfs"]
    return []
