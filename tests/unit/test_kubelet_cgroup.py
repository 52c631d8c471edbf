"""kubeletCgroups' move over a cgroup file tree of a test's own (v1 hierarchies, or v2's unified
one) and a /proc of its own: the cgroup made where usage is accounted, the process written in,
nothing done where it already is, and a read-only cgroupfs (a systemd unit's sandbox) refused with
what to do instead. tests/cpu_manager/test_node_settings.py runs a node with it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from shared.config.settings import ConfigError, load_kubelet_config
from shared.host import kubelet_cgroup
from shared.host.kubelet_cgroup import KubeletCgroupError, move

CGROUP = "/kube.slice/kubelet.service"


def v1_tree(tmp_path: Path, pid: int, where: str = "/user.slice") -> tuple[Path, Path]:
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    for h in ("cpu", "cpuacct", "memory", "pids", "cpuset"):
        (root / h).mkdir(parents=True)
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(f"5:memory:{where}\n4:cpu,cpuacct:{where}\n3:pids:{where}\n")
    return root, proc


def test_v1_the_process_joins_each_accounting_hierarchy(tmp_path):
    root, proc = v1_tree(tmp_path, 42)
    assert move(42, CGROUP, "probe", root, proc) == "/user.slice"
    for h in ("cpu", "cpuacct", "memory", "pids"):
        assert (root / h / "kube.slice/kubelet.service/cgroup.procs").read_text() == "42", h
    assert not (root / "cpuset" / "kube.slice").exists(), "cpuset is not where usage is accounted"


def test_a_process_already_there_is_left_alone(tmp_path):
    root, proc = v1_tree(tmp_path, 42, CGROUP)
    assert move(42, CGROUP, "probe", root, proc) is None
    assert not (root / "memory" / "kube.slice").exists()


def test_v2_the_ancestors_delegate_the_controllers_to_it(tmp_path):
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids io\n")
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "cgroup").write_text("0::/system.slice/pykubelet.service\n")
    assert move(7, CGROUP, "the supervisor", root, proc) == "/system.slice/pykubelet.service"
    assert (root / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (root / "kube.slice" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (root / "kube.slice/kubelet.service/cgroup.procs").read_text() == "7"


def test_a_read_only_cgroupfs_says_what_to_do_under_systemd(tmp_path, monkeypatch):
    root, proc = v1_tree(tmp_path, 42)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(os, "mkdir", read_only)
    with pytest.raises(KubeletCgroupError) as exc:
        move(42, CGROUP, "probe", root, proc)
    message = str(exc.value)
    assert message.startswith(f"kubeletCgroups {CGROUP}: cannot move probe (pid 42, in /user.slice) there: "
                              "Read-only file system.")
    assert "placed by their Slice=" in message


def test_the_setting_is_a_cgroup_path():
    assert load_kubelet_config({"kubeletCgroups": CGROUP})[0].kubelet_cgroups == CGROUP
    for bad in ("kube.slice", "/kube/../etc", "/a b", "/x\n"):
        with pytest.raises(ConfigError, match="kubeletCgroups"):
            load_kubelet_config({"kubeletCgroups": bad})


def test_cgroup_version_follows_the_root(tmp_path):
    assert kubelet_cgroup.cgroup_version(tmp_path) == 1
    (tmp_path / "cgroup.controllers").write_text("")
    assert kubelet_cgroup.cgroup_version(tmp_path) == 2
