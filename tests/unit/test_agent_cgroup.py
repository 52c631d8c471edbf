"""The "kubelet" system container of the Summary (shared/host/agent_cgroup.py): which cgroup is
the node agent's, from /proc/self/cgroup, and its figures beside the "pods" one."""

from __future__ import annotations

import pytest

from services.node_api.stats.provider import StatsProvider
from shared.host.agent_cgroup import agent_cgroup, process_cgroup
from shared.host.cgroups import CgroupReader
from shared.runtime.cri.fake import FakeRuntime
from tests.unit.test_node_api_stats import GIB, Clock, machine, write

V1 = ("12:memory:{m}\n11:pids:/\n4:cpu,cpuacct:{c}\n1:name=systemd:/system.slice/x.service\n0::/\n")


@pytest.mark.parametrize("text,version,want", [
    ("0::/pykubelet.slice/pykubelet-node-api.service\n", 2, "/pykubelet.slice"),  # systemd layout: the slice
    ("0::/user.slice/user-0.slice/session-3.scope\n", 2, "/user.slice/user-0.slice/session-3.scope"),  # `up`
    ("0::/\n", 2, "/"),
    (V1.format(m="/pykubelet.slice/a.service", c="/pykubelet.slice/a.service"), 1, "/pykubelet.slice"),
    (V1.format(m="/node", c="/node"), 1, "/node"),
    (V1.format(m="/process_api/7c18", c="/"), 1, None),  # hierarchies that differ: none, as the kubelet
    ("0::/a/../../etc\n", 2, None),
    ("garbage\n", 2, None),
])
def test_the_agents_cgroup(text, version, want):
    assert agent_cgroup(text, version) == want


def test_a_v1_process_needs_both_cpu_and_memory():
    assert process_cgroup("4:cpu,cpuacct:/x\n", 1) is None


async def test_the_summary_reports_it_as_the_kubelet_system_container(tmp_path, settings, store):
    cg, proc = tmp_path / "cgroup", tmp_path / "proc"
    write(cg / "cpuacct/cpuacct.usage", "100000000000\n")
    write(cg / "memory/memory.usage_in_bytes", str(3 * GIB))
    write(cg / "memory/memory.stat", f"total_inactive_file {GIB // 2}\n")
    write(cg / "cpuacct/pykubelet.slice/cpuacct.usage", "7000000000\n")
    write(cg / "memory/pykubelet.slice/memory.usage_in_bytes", str(300 * 2**20))
    write(cg / "memory/pykubelet.slice/memory.stat", f"total_inactive_file {100 * 2**20}\ntotal_rss {150 * 2**20}\n")
    write(cg / "memory/pykubelet.slice/memory.limit_in_bytes", str(GIB))
    write(cg / "cpuacct/kubepods/cpuacct.usage", "40000000000")
    write(cg / "memory/kubepods/memory.usage_in_bytes", str(GIB))
    write(cg / "memory/kubepods/memory.stat", f"total_inactive_file {GIB // 4}\n")
    write(proc / "meminfo", f"MemTotal:       {8 * GIB // 1024} kB\n")
    write(proc / "stat", "btime 1700000000\n")
    write(proc / "self/cgroup", V1.format(m="/pykubelet.slice/pykubelet-node-api.service",
                                          c="/pykubelet.slice/pykubelet-node-api.service"))
    write(proc / "self/mountinfo", "")
    runtime = FakeRuntime()
    stats = StatsProvider(runtime, runtime, store, settings, cgroups=CgroupReader(cg, proc), proc=proc,
                          machine=machine(tmp_path), clock=Clock())
    try:
        containers = (await stats.summary())["node"]["systemContainers"]
    finally:
        await stats.close()
    assert [c["name"] for c in containers] == ["kubelet", "pods"]
    kubelet = containers[0]
    assert kubelet["cpu"]["usageCoreNanoSeconds"] == 7 * 10**9
    assert kubelet["memory"]["workingSetBytes"] == 200 * 2**20, "usage minus inactive file"
    assert kubelet["memory"]["availableBytes"] == GIB - 200 * 2**20, "under the slice's memory limit"
    assert kubelet["startTime"]
