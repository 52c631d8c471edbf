"""kernelMemcgNotification (services/eviction/memcg_notifier.py) over a stand-in cgroup v1 tree:
where each memory threshold is registered, what is written to cgroup.event_control, and a
signalled eventfd waking the caller. The kernel's side is tests/integration/test_memcg_notifier.py."""

from __future__ import annotations

import asyncio
import os

from services.eviction.memcg_notifier import REFRESH, MemcgNotifier, Target, targets
from services.eviction.signals import SignalReader
from shared.config.settings import KubeletConfiguration
from shared.host.cgroups import CgroupReader

MIB, GIB = 2**20, 2**30


def v1_tree(tmp_path):
    root = tmp_path / "cg"
    for cgroup, usage, inactive in (("", 3 * GIB, 512 * MIB), ("kubepods", GIB, 128 * MIB)):
        d = root / "memory" / cgroup
        d.mkdir(parents=True, exist_ok=True)
        (d / "memory.usage_in_bytes").write_text(f"{usage}\n")
        (d / "memory.stat").write_text(f"total_inactive_file {inactive}\n")
        (d / "cgroup.event_control").write_text("")
    (root / "cpuacct" / "kubepods").mkdir(parents=True)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text(f"MemTotal: {8 * GIB // 1024} kB\n")
    return root, proc


def test_each_memory_threshold_is_registered_where_its_signal_would_be_met(tmp_path):
    root, proc = v1_tree(tmp_path)
    k = KubeletConfiguration.model_validate({"evictionHard": {"memory.available": "1Gi",
                                                              "allocatableMemory.available": "10%"},
                                             "evictionSoft": {"memory.available": "2Gi"},
                                             "evictionSoftGracePeriod": {"memory.available": "1m"}})
    signals = SignalReader(tmp_path, 4 * GIB, CgroupReader(root, proc), proc)
    got = {(t.description, t.cgroup): t.usage for t in targets(k.eviction_thresholds(), signals)}
    assert got == {
        # capacity 8 GiB less the threshold, plus the root's 512 MiB of inactive file pages
        ("hard memory eviction threshold", "/"): 7 * GIB + 512 * MIB,
        ("soft memory eviction threshold", "/"): 6 * GIB + 512 * MIB,
        # allocatable 4 GiB less 10 % of it, plus the pods' cgroup's 128 MiB inactive
        ("hard allocatable memory eviction threshold", "/kubepods"): 4 * GIB - int(0.1 * 4 * GIB) + 128 * MIB,
    }


async def test_a_signalled_eventfd_calls_back_and_registrations_are_renewed_every_refresh(tmp_path):
    root, proc = v1_tree(tmp_path)
    now = [100.0]
    crossed: list[str] = []
    notifier = MemcgNotifier(CgroupReader(root, proc), crossed.append, clock=lambda: now[0])
    assert notifier.supported
    notifier.refresh(lambda: [Target("hard memory eviction threshold", "/", 123456)])
    efd, usage_fd, limit = (root / "memory/cgroup.event_control").read_text().split()
    assert int(efd) == notifier._fds[0] and limit == "123456"
    os.eventfd_write(int(efd), 1)  # what the kernel does when usage crosses the threshold
    await asyncio.sleep(0.05)
    assert crossed == ["eviction manager: hard memory eviction threshold crossed"]

    notifier.refresh(lambda: [Target("hard memory eviction threshold", "/", 999)])
    assert (root / "memory/cgroup.event_control").read_text().endswith(" 123456"), "not again before REFRESH"
    now[0] += REFRESH
    (root / "memory/cgroup.event_control").write_text("")  # the kernel's file keeps nothing written
    notifier.refresh(lambda: [Target("hard memory eviction threshold", "/", 999)])
    assert (root / "memory/cgroup.event_control").read_text().endswith(" 999")
    notifier.close()
    assert notifier._fds == []


async def test_a_cgroup_it_cannot_register_in_leaves_memory_polled(tmp_path, caplog):
    root, proc = v1_tree(tmp_path)
    (root / "memory/cgroup.event_control").unlink()
    notifier = MemcgNotifier(CgroupReader(root, proc), lambda _: None)
    notifier.refresh(lambda: [Target("hard memory eviction threshold", "/", 1)])
    assert notifier._fds == []
    assert "kernelMemcgNotification: cannot register a memory threshold" in caplog.text


def test_cgroup_v2_has_no_thresholds_to_register(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory")
    assert not MemcgNotifier(CgroupReader(tmp_path), lambda _: None).supported
