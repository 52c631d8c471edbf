"""A cgroup's limits and counters as cAdvisor reports them (container_spec_*, CPU time, CFS
throttling, page cache), from v1 and v2 cgroup trees written in a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.host.cgroup_processes import CgroupProcesses, read_processes
from shared.host.cgroup_spec import V2_ONLY, CgroupCounters, CgroupSpec, read_figures, weight_to_shares
from shared.host.cgroups import CgroupReader

V1_UNLIMITED = "9223372036854771712"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def proc(tmp_path):
    write(tmp_path / "proc/meminfo", "MemTotal:        4096 kB\nMemFree:  1024 kB\nSwapTotal:  2048 kB\n")
    return tmp_path / "proc"


def v1_cgroup(root: Path, name: str, *, quota: str, memory_limit: str, memsw: str) -> None:
    cpu, acct, mem = (root / c / name.strip("/") for c in ("cpu", "cpuacct", "memory"))
    write(cpu / "cpu.shares", "204\n")
    write(cpu / "cpu.cfs_period_us", "100000\n")
    write(cpu / "cpu.cfs_quota_us", f"{quota}\n")
    write(cpu / "cpu.stat", "nr_periods 50\nnr_throttled 7\nthrottled_time 250000000\nnr_bursts 4\n"
                            "burst_time 125000000\n")
    write(acct / "cpuacct.stat", "user 150\nsystem 25\n")
    write(mem / "memory.limit_in_bytes", f"{memory_limit}\n")
    write(mem / "memory.soft_limit_in_bytes", f"{V1_UNLIMITED}\n")
    write(mem / "memory.memsw.limit_in_bytes", f"{memsw}\n")
    write(mem / "memory.use_hierarchy", "1\n")
    write(mem / "memory.stat", "cache 1\nmapped_file 2\npgfault 10\npgmajfault 1\ntotal_cache 4096\n"
                               "total_mapped_file 512\ntotal_active_file 300\ntotal_inactive_file 400\n"
                               "total_pgfault 30\ntotal_pgmajfault 3\n")
    write(mem / "memory.kmem.usage_in_bytes", "2048\n")
    write(mem / "memory.failcnt", "3\n")
    write(mem / "memory.max_usage_in_bytes", "65536\n")


def test_a_v1_container_with_limits(tmp_path, proc):
    v1_cgroup(tmp_path / "cg", "/kubepods/podx/c1", quota="50000", memory_limit="268435456", memsw="536870912")
    found = read_figures(CgroupReader(tmp_path / "cg", proc), "/kubepods/podx/c1")
    spec, counters = found.spec, found.counters
    assert spec == CgroupSpec(cpu_shares=204, cpu_period=100000, cpu_quota=50000, memory_limit=268435456,
                              memory_reservation=0, memory_swap_limit=536870912)
    assert counters == CgroupCounters(user_seconds=1.5, system_seconds=0.25, cfs_periods=50, cfs_throttled_periods=7,
                                      cfs_throttled_seconds=0.25, cfs_burst_periods=4, cfs_burst_seconds=0.125,
                                      memory_cache=4096, memory_mapped_file=512,
                                      memory_failcnt=3, memory_max_usage=65536, memory_kernel_usage=2048,
                                      memory_active_file=300, memory_inactive_file=400, pgfault=10, pgmajfault=1,
                                      hierarchy_pgfault=30, hierarchy_pgmajfault=3, **dict.fromkeys(V2_ONLY, 0))


def test_v1_without_a_quota_or_limits_reports_zeros_and_no_throttling(tmp_path, proc):
    v1_cgroup(tmp_path / "cg", "/kubepods/podx", quota="-1", memory_limit=V1_UNLIMITED, memsw=V1_UNLIMITED)
    found = read_figures(CgroupReader(tmp_path / "cg", proc), "/kubepods/podx")
    spec, counters = found.spec, found.counters
    assert (spec.cpu_quota, spec.memory_limit, spec.memory_swap_limit) == (0, 0, 0)
    assert counters.cfs_periods is None and counters.cfs_throttled_seconds is None
    assert counters.cfs_burst_periods is None and counters.cfs_burst_seconds is None


def test_the_roots_memory_limits_are_the_nodes_memory_and_swap(tmp_path, proc):
    v1_cgroup(tmp_path / "cg", "/", quota="-1", memory_limit=V1_UNLIMITED, memsw=V1_UNLIMITED)
    spec = read_figures(CgroupReader(tmp_path / "cg", proc), "/").spec
    assert (spec.memory_limit, spec.memory_swap_limit) == (4096 * 1024, 2048 * 1024)


def test_a_v2_container(tmp_path, proc):
    d = tmp_path / "cg2" / "kubepods/burstable/podx/c1"
    write(tmp_path / "cg2/cgroup.controllers", "cpu memory pids\n")
    write(d / "cpu.weight", "39\n")
    write(d / "cpu.max", "max 100000\n")
    write(d / "cpu.stat", "usage_usec 9000\nuser_usec 6000\nsystem_usec 3000\nnr_periods 9\nnr_throttled 1\n"
                          "throttled_usec 500\nnr_bursts 2\nburst_usec 1500\n")
    write(d / "memory.max", "max\n")
    write(d / "memory.min", "1048576\n")
    write(d / "memory.swap.max", "0\n")
    write(d / "memory.stat", "anon 10\nfile 8192\nfile_mapped 1024\nactive_file 5\ninactive_file 6\npgfault 7\n"
                             "pgmajfault 8\nfile_dirty 9\nfile_writeback 10\npgscan 11\npgsteal 12\n"
                             "workingset_refault_anon 13\nworkingset_refault_file 14\n")
    write(d / "memory.events", "low 0\nhigh 2\nmax 3\noom 0\noom_kill 0\n")
    found = read_figures(CgroupReader(tmp_path / "cg2", proc), "/kubepods/burstable/podx/c1")
    spec, counters = found.spec, found.counters
    assert spec == CgroupSpec(cpu_shares=weight_to_shares(39), cpu_period=100000, cpu_quota=0, memory_limit=0,
                              memory_reservation=1048576, memory_swap_limit=0)
    assert weight_to_shares(39) == 998, "cAdvisor's linear inverse of the weight"
    assert counters == CgroupCounters(user_seconds=0.006, system_seconds=0.003, memory_cache=8192,
                                      memory_mapped_file=1024, memory_failcnt=0, memory_max_usage=0,
                                      memory_kernel_usage=0, memory_active_file=5, memory_inactive_file=6,
                                      pgfault=7, pgmajfault=8, hierarchy_pgfault=7, hierarchy_pgmajfault=8,
                                      memory_events_high=2, memory_events_max=3, file_dirty=9, file_writeback=10,
                                      pgscan=11, pgsteal=12, workingset_refault_file=14, workingset_refault_anon=13)
    write(d / "cpu.max", "25000 100000\n")
    write(d / "memory.peak", "70000\n")
    found = read_figures(CgroupReader(tmp_path / "cg2", proc), "/kubepods/burstable/podx/c1")
    spec, counters = found.spec, found.counters
    assert spec.cpu_quota == 25000
    assert (counters.cfs_periods, counters.cfs_throttled_periods, counters.cfs_throttled_seconds) == (9, 1, 0.0005)
    assert (counters.cfs_burst_periods, counters.cfs_burst_seconds) == (2, 0.0015)
    assert counters.memory_max_usage == 70000


def test_a_cgroup_that_is_gone_or_not_a_name_has_no_figures(tmp_path, proc):
    reader = CgroupReader(tmp_path / "cg", proc)
    assert read_figures(reader, "/kubepods/gone") is None
    assert read_figures(reader, "/kubepods/../../etc") is None


def test_processes_threads_descriptors_and_sockets(tmp_path):
    """Processes are the cgroup's own (cgroup.procs of the cpu controller); threads and their limit
    the pids controller's, for the subtree; descriptors and sockets from /proc/<pid>/fd."""
    cg, proc = tmp_path / "cg", tmp_path / "proc"
    write(cg / "cpu/kubepods/podx/c1/cgroup.procs", "101\n102\n")
    write(cg / "pids/kubepods/podx/c1/pids.current", "5\n")
    write(cg / "pids/kubepods/podx/c1/pids.max", "max\n")
    for pid, targets in ((101, ["/dev/null", "socket:[123]", "pipe:[9]"]), (102, ["socket:[124]"])):
        fd = proc / str(pid) / "fd"
        fd.mkdir(parents=True)
        for n, target in enumerate(targets):
            (fd / str(n)).symlink_to(target)
    write(proc / "101/limits", "Limit                     Soft Limit           Hard Limit           Units\n"
                               "Max cpu time              unlimited            unlimited            seconds\n"
                               "Max open files            1024                 524288               files\n")
    reader = CgroupReader(cg, proc)
    assert read_processes(reader, "/kubepods/podx/c1") == CgroupProcesses(
        processes=2, threads=5, threads_max=0, file_descriptors=4, sockets=2, open_files_soft=1024)
    write(cg / "pids/kubepods/podx/c1/pids.max", "1024\n")
    write(cg / "cpu/kubepods/podx/c1/cgroup.procs", "101\n102\n999\n")  # 999 ended meanwhile
    assert read_processes(reader, "/kubepods/podx/c1") == CgroupProcesses(
        processes=3, threads=5, threads_max=1024, file_descriptors=4, sockets=2, open_files_soft=1024)
    write(proc / "101/limits", "Max open files            unlimited            unlimited            files\n")
    assert read_processes(reader, "/kubepods/podx/c1").open_files_soft == -1, "cAdvisor's -1 for unlimited"
    assert read_processes(reader, "/kubepods/gone") is None


def test_on_v1_the_root_has_no_pids_figures(tmp_path):
    cg = tmp_path / "cg"
    write(cg / "cpu/cgroup.procs", "1\n")
    write(cg / "pids/pids.current", "500\n")
    assert read_processes(CgroupReader(cg, tmp_path / "proc"), "/") == CgroupProcesses(
        processes=1, threads=0, threads_max=0, file_descriptors=0, sockets=0)
