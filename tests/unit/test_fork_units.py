"""The service units forked from pykubelet-preload.service set only what a forked process can take
on from its launcher (shared/host/process_sandbox.py); the fork server's request checks; the
sandbox reading helpers."""

from __future__ import annotations

import json
import re

import pytest

from services.cli.install_cmd import TEMPLATES
from services.supervisor.fork_server import Request, RequestError, parse_request
from shared.host.process_sandbox import SandboxError, cgroup_procs_files, parse_status, refusal
from shared.process.admin import SERVICES

# [Service] settings a forked service gets as it would from systemd itself: the launcher's
# cgroup (Slice=, the unit's own), namespaces (the mount namespace carries ProtectSystem= and its
# kin), capabilities, no_new_privs, seccomp filters (SystemCallFilter= and the Restrict*/Lock*
# options; MemoryDenyWriteExecute= there or as the launcher's PR_SET_MDWE), limits, OOM score, working directory, environment (EnvironmentFile=, LoadCredential=),
# standard streams; and what systemd does around the process (restart, timeouts, notify).
TAKEN_ON = {
    "Slice", "Type", "NotifyAccess", "WorkingDirectory", "EnvironmentFile", "LoadCredential", "ExecStart",
    "Restart", "RestartSec", "TimeoutStartSec", "TimeoutStopSec", "OOMScoreAdjust", "LimitNOFILE",
    "NoNewPrivileges", "LockPersonality", "RestrictRealtime", "SystemCallArchitectures", "SystemCallFilter",
    "RestrictAddressFamilies", "RestrictNamespaces", "RestrictSUIDSGID", "CapabilityBoundingSet",
    "ProtectSystem", "ReadWritePaths", "ReadOnlyPaths", "BindReadOnlyPaths", "ProtectHome", "PrivateTmp",
    "PrivateDevices", "DeviceAllow", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
    "ProtectControlGroups", "ProtectClock", "ProtectHostname", "MemoryDenyWriteExecute",
}


@pytest.mark.parametrize("service", SERVICES)
def test_every_forked_unit_sets_only_what_a_forked_service_takes_on(service):
    text = (TEMPLATES / f"pykubelet-{service}.service").read_text()
    body = text.split("[Service]", 1)[1]
    keys = {m.group(1) for m in re.finditer(r"^([A-Za-z]+)=", body, re.M)}
    assert keys <= TAKEN_ON, f"not taken on by a forked service: {sorted(keys - TAKEN_ON)}"
    assert f"ExecStart=@PYTHON@ -m services.cli.main fork {service} " in text
    assert "NotifyAccess=all" in text  # READY=1 comes from the forked service, not the main process
    assert "pykubelet-preload.service" in text.split("[Service]")[0]


def test_the_preload_unit_has_no_mount_namespace_of_its_own():
    text = (TEMPLATES / "pykubelet-preload.service").read_text()
    settings = [line for line in text.splitlines() if not line.startswith("#")]
    for option in ("ProtectSystem", "PrivateTmp", "ProtectHome", "PrivateDevices", "CapabilityBoundingSet",
                   "NoNewPrivileges", "SystemCallFilter"):
        assert not any(line.startswith(option + "=") for line in settings), option


def _body(**fields) -> bytes:
    return json.dumps({"service": "probe", "args": ["--root-dir", "/x"], "env": {"A": "b"}, **fields}).encode()


def test_a_launchers_request_is_checked():
    assert parse_request(_body()) == Request("probe", ["--root-dir", "/x"], {"A": "b"}, 0)
    assert parse_request(_body(mdwe=1)).mdwe == 1
    for body, reason in [
        (b"\xff", "not JSON"), (b"[1]", "not a JSON object"),
        (_body(service="sh"), "not a pykubelet service"), (_body(service=None), "not a pykubelet service"),
        (_body(args="--root-dir /"), "list of strings"), (_body(args=["a\0b"]), "list of strings"),
        (_body(env={"A=B": "c"}), "env must map"), (_body(env={"A": 1}), "env must map"),
        (_body(env=["A"]), "env must map"), (_body(mdwe=True), "mdwe"), (_body(mdwe=-1), "mdwe"),
    ]:
        with pytest.raises(RequestError, match=reason):
            parse_request(body)


V1_MOUNTS = [("/sys/fs/cgroup/memory", "cgroup", {"rw", "memory"}),
             ("/sys/fs/cgroup/cpu,cpuacct", "cgroup", {"rw", "cpu", "cpuacct"}),
             ("/sys/fs/cgroup/systemd", "cgroup", {"rw", "xattr", "name=systemd"})]


def test_the_launchers_cgroups_map_to_the_hierarchies_mounted_here():
    v1 = ["4:memory:/pykubelet.slice/a.service", "3:cpu,cpuacct:/pykubelet.slice/a.service",
          "1:name=systemd:/pykubelet.slice/a.service"]
    assert [str(p) for p in cgroup_procs_files(v1, V1_MOUNTS)] == [
        "/sys/fs/cgroup/memory/pykubelet.slice/a.service/cgroup.procs",
        "/sys/fs/cgroup/cpu,cpuacct/pykubelet.slice/a.service/cgroup.procs",
        "/sys/fs/cgroup/systemd/pykubelet.slice/a.service/cgroup.procs"]
    v2 = [("/sys/fs/cgroup", "cgroup2", {"rw", "nsdelegate"})]
    assert [str(p) for p in cgroup_procs_files(["0::/pykubelet.slice/a.service"], v2)] == [
        "/sys/fs/cgroup/pykubelet.slice/a.service/cgroup.procs"]
    assert [str(p) for p in cgroup_procs_files(["0::/"], v2)] == ["/sys/fs/cgroup/cgroup.procs"]
    with pytest.raises(SandboxError, match="unexpected cgroup line"):
        cgroup_procs_files(["0::/a/../../etc"], v2)
    with pytest.raises(SandboxError, match="not mounted"):
        cgroup_procs_files(["5:blkio:/a"], V1_MOUNTS)


def test_what_a_forked_process_cannot_take_on_is_refused():
    status = parse_status("Name:\tpython\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nCapBnd:\t000001ffffffffff\n")
    assert status["CapBnd"] == "000001ffffffffff" and status["Uid"] == "0 0 0 0"
    assert refusal(status, {}, "/") is None
    assert "another user" in refusal(dict(status, Uid="1000 1000 1000 1000"), {}, "/")
    assert "pid namespace" in refusal(status, {"pid": 4026531836}, "/")
    assert "user namespace" in refusal(status, {"user": 4026531837}, "/")
    assert "root directory" in refusal(status, {}, "/srv/chroot")
