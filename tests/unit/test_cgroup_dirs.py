"""Cgroup directories pykubelet makes are 0755 under the services' umask 077, as the kubelet's."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from services.pod_sync import pod_cgroup
from shared.host.cgroup_dirs import make_dirs


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.fixture
def private_umask():
    old = os.umask(0o077)
    yield
    os.umask(old)


def test_levels_made_under_umask_077_are_0755(tmp_path: Path, private_umask: None) -> None:
    d = make_dirs(tmp_path, "/kubepods/burstable/pod1")
    assert d == tmp_path / "kubepods" / "burstable" / "pod1"
    assert [mode(p) for p in (d.parent.parent, d.parent, d)] == [0o755] * 3


def test_own_cgroups_an_older_pykubelet_made_private_are_opened(tmp_path: Path, private_umask: None) -> None:
    (tmp_path / "kubepods").mkdir(mode=0o700)
    make_dirs(tmp_path, "kubepods/besteffort")
    assert mode(tmp_path / "kubepods") == 0o755


def test_an_existing_cgroup_not_ours_keeps_its_mode(tmp_path: Path, private_umask: None) -> None:
    (tmp_path / "admin").mkdir(mode=0o750)
    os.chmod(tmp_path / "admin", 0o750)
    make_dirs(tmp_path, "admin/pykubelet", own=False)
    assert mode(tmp_path / "admin") == 0o750
    assert mode(tmp_path / "admin" / "pykubelet") == 0o755


def test_before_each_sees_every_parent_in_order(tmp_path: Path) -> None:
    seen: list[Path] = []
    make_dirs(tmp_path, "a/b", before_each=seen.append)
    assert seen == [tmp_path, tmp_path / "a"]


def test_pod_cgroup_and_qos_tiers_are_readable_by_other_users(tmp_path: Path, private_umask: None) -> None:
    """A non-root reader (a monitoring agent, a pod reading its own limits) walks into them."""
    for controller in ("cpu", "memory"):
        (tmp_path / controller).mkdir()
    config = pod_cgroup.PodCgroupConfig(cpu_shares=102, cpu_quota=None, memory_limit=None)
    # the kernel makes the files inside; here they are written as plain files
    assert pod_cgroup.ensure("/kubepods/burstable/podabc", config, tmp_path) == []
    assert pod_cgroup.set_qos_tiers([], tmp_path) == []
    for controller in ("cpu", "memory"):
        for rel in ("kubepods", "kubepods/burstable", "kubepods/burstable/podabc"):
            assert mode(tmp_path / controller / rel) == 0o755, (controller, rel)
    assert mode(tmp_path / "cpu" / "kubepods" / "besteffort") == 0o755
