"""shared/process/self_limits.py on a stand-in /proc/self and a patched RLIMIT_NOFILE."""

from __future__ import annotations

import errno
import resource
from pathlib import Path

import pytest

from shared.process import self_limits
from shared.process.self_limits import SelfLimits


@pytest.fixture
def proc_self(tmp_path) -> Path:
    (tmp_path / "oom_score_adj").write_text("0\n")
    return tmp_path


@pytest.fixture
def nofile(monkeypatch):
    limit = {"value": (1024, 4096), "hard_cap": 2_000_000}

    def setrlimit(which, value):
        assert which == resource.RLIMIT_NOFILE
        if value[1] > limit["hard_cap"]:
            raise ValueError("not allowed to raise maximum limit")
        limit["value"] = value

    monkeypatch.setattr(resource, "getrlimit", lambda which: limit["value"])
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return limit


def test_both_are_applied(proc_self, nofile):
    assert self_limits.apply(SelfLimits(-999, 1000000), proc_self) == []
    assert (proc_self / "oom_score_adj").read_text() == "-999\n"
    assert nofile["value"] == (1000000, 1000000)


def test_what_is_already_set_is_not_written_again(proc_self, nofile, monkeypatch):
    (proc_self / "oom_score_adj").write_text("-999\n")
    (proc_self / "oom_score_adj").chmod(0o444)  # a write would fail (root aside): none is tried
    nofile["value"] = (1000000, 1000000)
    monkeypatch.setattr(Path, "write_text", lambda *a, **k: pytest.fail("written again"))
    assert self_limits.apply(SelfLimits(-999, 1000000), proc_self) == []


def test_what_cannot_be_set_is_named_with_what_to_do_and_the_rest_still_applies(proc_self, nofile, monkeypatch,
                                                                              caplog):
    def refuse(self, *_a, **_k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(Path, "write_text", refuse)
    nofile["hard_cap"] = 65536  # the unit's LimitNOFILE, no CAP_SYS_RESOURCE to go above it
    problems = self_limits.apply(SelfLimits(-999, 1000000), proc_self)
    assert len(problems) == 2
    assert problems[0].startswith("oomScoreAdj -999 not applied") and "OOMScoreAdjust=" in problems[0]
    assert problems[1].startswith("maxOpenFiles 1000000 not applied") and "stays 1024/4096" in problems[1]
    assert "LimitNOFILE=" in problems[1] and "set maxOpenFiles: 4096" in problems[1]
    assert "set oomScoreAdj: 0" in problems[0]
    assert [r.getMessage() for r in caplog.records] == problems


def test_a_lower_limit_is_applied_without_privilege(proc_self, nofile):
    nofile["value"], nofile["hard_cap"] = (1024, 1000000), 1000000
    assert self_limits.apply(SelfLimits(0, 65536), proc_self) == []
    assert nofile["value"] == (65536, 65536)
