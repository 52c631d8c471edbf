"""A cgroup's limits and counters as cAdvisor reports them (container_spec_*, CPU time, CFS
throttling, page cache), from v1 and v2 cgroup trees written in a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.host.cgroup_spec import CgroupCounters, CgroupSpec, read_figures, weight_to_shares
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
    write(cpu / "cpu.stat", "nr_periods 50\nnr_throttled 7\nthrottled_time 250000000\n")
    write(acct / "cpuacct.stat", "user 150\nsystem 25\n")
    write(mem / "memory.limit_in_bytes", f"{memory_limit}\n")
    write(mem / "memory.soft_limit_in_bytes", f"{V1_UNLIMITED}\n")
    write(mem / "memory.memsw.limit_in_bytes", f"{memsw}\n")
    write(mem / "memory.use_hierarchy", "1\n")
    write(mem / "memory.stat", "cache 1\nmapped_file 2\ntotal_cache 4096\ntotal_mapped_file 512\n")
    write(mem / "memory.failcnt", "3\n")
    write(mem / "memory.max_usage_in_bytes", "65536\n")


def test_a_v1_container_with_limits(tmp_path, proc):
    v1_cgroup(tmp_path / "cg", "/kubepods/podx/c1", quota="50000", memory_limit="268435456", memsw="536870912")
    spec, counters = read_figures(CgroupReader(tmp_path / "cg", proc), "/kubepods/podx/c1")
    assert spec == CgroupSpec(cpu_shares=204, cpu_period=100000, cpu_quota=50000, memory_limit=268435456,
                              memory_reservation=0, memory_swap_limit=536870912)
    assert counters == CgroupCounters(user_seconds=1.5, system_seconds=0.25, cfs_periods=50, cfs_throttled_periods=7,
                                      cfs_throttled_seconds=0.25, memory_cache=4096, memory_mapped_file=512,
                                      memory_failcnt=3, memory_max_usage=65536)


def test_v1_without_a_quota_or_limits_reports_zeros_and_no_throttling(tmp_path, proc):
    v1_cgroup(tmp_path / "cg", "/kubepods/podx", quota="-1", memory_limit=V1_UNLIMITED, memsw=V1_UNLIMITED)
    spec, counters = read_figures(CgroupReader(tmp_path / "cg", proc), "/kubepods/podx")
    assert (spec.cpu_quota, spec.memory_limit, spec.memory_swap_limit) == (0, 0, 0)
    assert counters.cfs_periods is None and counters.cfs_throttled_seconds is None


def test_the_roots_memory_limits_are_the_nodes_memory_and_swap(tmp_path, proc):
    v1_cgroup(tmp_path / "cg", "/", quota="-1", memory_limit=V1_UNLIMITED, memsw=V1_UNLIMITED)
    spec, _ = read_figures(CgroupReader(tmp_path / "cg", proc), "/")
    assert (spec.memory_limit, spec.memory_swap_limit) == (4096 * 1024, 2048 * 1024)


def test_a_v2_container(tmp_path, proc):
    d = tmp_path / "cg2" / "kubepods/burstable/podx/c1"
    write(tmp_path / "cg2/cgroup.controllers", "cpu memory pids\n")
    write(d / "cpu.weight", "39\n")
    write(d / "cpu.max", "max 100000\n")
    write(d / "cpu.stat", "usage_usec 9000\nuser_usec 6000\nsystem_usec 3000\nnr_periods 9\nnr_throttled 1\n"
                          "throttled_usec 500\n")
    write(d / "memory.max", "max\n")
    write(d / "memory.min", "1048576\n")
    write(d / "memory.swap.max", "0\n")
    write(d / "memory.stat", "anon 10\nfile 8192\nfile_mapped 1024\n")
    spec, counters = read_figures(CgroupReader(tmp_path / "cg2", proc), "/kubepods/burstable/podx/c1")
    assert spec == CgroupSpec(cpu_shares=weight_to_shares(39), cpu_period=100000, cpu_quota=0, memory_limit=0,
                              memory_reservation=1048576, memory_swap_limit=0)
    assert weight_to_shares(39) == 998, "cAdvisor's linear inverse of the weight"
    assert counters == CgroupCounters(user_seconds=0.006, system_seconds=0.003, memory_cache=8192,
                                      memory_mapped_file=1024, memory_failcnt=0, memory_max_usage=0)
    write(d / "cpu.max", "25000 100000\n")
    write(d / "memory.peak", "70000\n")
    spec, counters = read_figures(CgroupReader(tmp_path / "cg2", proc), "/kubepods/burstable/podx/c1")
    assert spec.cpu_quota == 25000
    assert (counters.cfs_periods, counters.cfs_throttled_periods, counters.cfs_throttled_seconds) == (9, 1, 0.0005)
    assert counters.memory_max_usage == 70000


def test_a_cgroup_that_is_gone_or_not_a_name_has_no_figures(tmp_path, proc):
    reader = CgroupReader(tmp_path / "cg", proc)
    assert read_figures(reader, "/kubepods/gone") is None
    assert read_figures(reader, "/kubepods/../../etc") is None
