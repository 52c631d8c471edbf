"""The fork server (pykubelet-preload.service) on this host: a launcher started in a sandbox of
its own gets its service forked from the preloaded server, and the service runs in the launcher's
sandbox (cgroup, namespaces, limits, capabilities, no_new_privs, seccomp filters, environment,
standard streams), not the server's. The launcher stays the unit's main process: a SIGTERM to it
stops the service, and it ends as the service did (exit code or signal), told by the server, which
reaps the service. Bad requests are refused with the reason and the server keeps serving; with no
server, or a sandbox it cannot copy, the launcher runs the service itself.

The launcher is started the way systemd would set up a unit: `unshare` for namespaces, `setpriv`
for the bounding set and no_new_privs, and tests/integration/fork_launcher.py for the rest
(a cgroup, limits, an OOM score, a seccomp filter) before it execs `pykubelet fork`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from shared.host.process_sandbox import parse_status
from shared.host.seccomp_filters import read_filters
from tests.integration.conftest import wait_for
from tests.integration.fork_launcher import ALLOW_PROGRAM, DENIED_PROGRAM

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21
# The service asked for: probe, pointed at a bus that is not there, waits for it (and logs that).
NO_BUS = "nats://127.0.0.1:1"


@pytest.fixture
def server(tmp_path):
    sock = tmp_path / "run" / "fork.sock"
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([PY, "-m", "services.cli.main", "fork-server", "--socket", str(sock)], cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: sock.exists() or proc.poll() is not None, 60, "the fork server's socket")
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        yield sock, proc, tmp_path / "server.log"
    finally:
        forked = [int(p) for p in re.findall(r"forked \S+ \(pid (\d+)\)", (tmp_path / "server.log").read_text())]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        for pid in forked:  # the services outlive the server, as units outlive the preload unit
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"pykubelet"):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        log.close()


def _cgroup_dir() -> Path:
    """A fresh cgroup for the launcher: the pids hierarchy on v1, the unified one on v2."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    base = Path("/sys/fs/cgroup") if v2 else Path("/sys/fs/cgroup/pids")
    path = base / f"pykubelet-fork-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return path


def _launch(sock: Path, tmp_path: Path, cgroup: Path | None, *wrap: str,
            flags: tuple[str, ...] = ("--nats-url", NO_BUS)) -> tuple[subprocess.Popen, Path]:
    """A launcher for the probe service, running (it stays as long as the service)."""
    out = tmp_path / f"service-{uuid.uuid4().hex[:6]}.log"
    env = dict(os.environ, PYKUBELET_FORK_SOCKET=str(sock))
    argv = [*wrap, PY, "-m", "tests.integration.fork_launcher", "--cwd", str(tmp_path),
            *(["--cgroup", str(cgroup)] if cgroup else []), "--",
            PY, "-m", "services.cli.main", "fork", "probe", "--root-dir", str(tmp_path / "root"), *flags]
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=stdout, stderr=subprocess.STDOUT)
    return proc, out


def _wait_forked(server_log: Path, launcher: subprocess.Popen, out: Path) -> int:
    """The pid of the probe forked for `launcher`, once the server has said so."""
    wait_for(lambda: launcher.poll() is not None or re.search(r"forked probe \(pid \d+\) for its unit's launcher "
                                                              rf"\(pid {launcher.pid}\)", server_log.read_text()),
             60, "the server's word that it forked the probe")
    assert launcher.poll() is None, out.read_text()
    found = re.findall(rf"forked probe \(pid (\d+)\) for its unit's launcher \(pid {launcher.pid}\)",
                       server_log.read_text())
    return int(found[-1])


def _end(launcher: subprocess.Popen) -> None:
    if launcher.poll() is None:
        launcher.kill()
    launcher.wait(10)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0
    except OSError:
        return False


def test_a_forked_service_runs_in_its_launchers_sandbox(server, tmp_path):
    sock, proc, server_log = server
    cgroup = _cgroup_dir()
    launcher, out = _launch(sock, tmp_path, cgroup, "unshare", "--uts", "--ipc", "setpriv", "--no-new-privs",
                            "--bounding-set", "-all,+net_admin,+sys_admin")
    try:
        pid = _wait_forked(server_log, launcher, out)
        assert "not forked" not in out.read_text(), out.read_text()
        assert _alive(pid), server_log.read_text()
        status = parse_status(Path(f"/proc/{pid}/status").read_text())
        # The server's child, not the launcher's: the preloaded pages are shared.
        assert int(status["PPid"]) == proc.pid
        wait_for(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"pykubelet probe --root-dir"), 30,
                 "the forked service's title")
        # The launcher stays, as the small shell script that waits.
        wait_for(lambda: b"unit_waiter.sh" in Path(f"/proc/{launcher.pid}/cmdline").read_bytes(), 30,
                 "the launcher become the unit's waiter")
        # Cgroup: the launcher's, where the launcher stays beside it.
        cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        assert "/" + cgroup.name in cgroups, cgroups
        assert set((cgroup / "cgroup.procs").read_text().split()) == {str(pid), str(launcher.pid)}
        # Namespaces: the launcher's own uts and ipc, not the server's.
        for ns in ("uts", "ipc"):
            assert os.stat(f"/proc/{pid}/ns/{ns}").st_ino != os.stat(f"/proc/self/ns/{ns}").st_ino, ns
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino
        # Privileges: the launcher's bounding set and no_new_privs, and its seccomp filter, exactly.
        assert int(status["CapBnd"], 16) == (1 << CAP_NET_ADMIN) | (1 << CAP_SYS_ADMIN), status["CapBnd"]
        assert int(status["CapEff"], 16) == int(status["CapBnd"], 16)
        assert status["NoNewPrivs"] == "1"
        assert status["Seccomp"] == "2"
        programs = [f.program for f in read_filters(pid)]
        assert programs[-2:] == [ALLOW_PROGRAM, DENIED_PROGRAM], programs  # in the launcher's order
        # Limits, OOM score, working directory (the service sets its umask itself).
        files = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
                     if line.startswith("Max open files"))
        assert files.split()[3:5] == ["4321", "4321"], files
        assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "500"
        assert os.readlink(f"/proc/{pid}/cwd") == str(tmp_path)
        # Its standard streams are the launcher's: the service's log lands where the unit's would.
        wait_for(lambda: "event bus error" in out.read_text(), 30, "the forked probe's log in the launcher's output")
        # A stop (systemd's SIGTERM to the main process) reaches the service, and the launcher ends
        # when it has, with its exit code.
        launcher.send_signal(signal.SIGTERM)
        code = launcher.wait(60)
        assert not _alive(pid)
        ended = re.findall(rf"probe \(pid {pid}\) ended: exit code (\d+)", server_log.read_text())
        assert ended and code == int(ended[0]), (code, server_log.read_text())
        assert "probe stopped" in out.read_text(), out.read_text()
    finally:
        _end(launcher)
        for pid in (cgroup / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        wait_for(lambda: not (cgroup / "cgroup.procs").read_text().strip(), 10, "the test cgroup empty")
        cgroup.rmdir()


def test_the_launcher_ends_as_its_service_did(server, tmp_path):
    """What systemd sees of the unit's main process is what the service did: its exit code on a
    failed start, the signal that killed it."""
    sock, _, server_log = server
    launcher, out = _launch(sock, tmp_path, None, flags=("--config", str(tmp_path / "no-such-config.yaml")))
    try:
        assert launcher.wait(60) == 2, out.read_text()
        assert "no-such-config.yaml" in out.read_text(), out.read_text()
        assert "not forked" not in out.read_text()
    finally:
        _end(launcher)
    launcher, out = _launch(sock, tmp_path, None)
    try:
        pid = _wait_forked(server_log, launcher, out)
        os.kill(pid, signal.SIGKILL)
        assert launcher.wait(30) == -signal.SIGKILL, out.read_text()
    finally:
        _end(launcher)


def test_a_service_outlives_its_fork_server_and_its_launcher_still_sees_it_end(server, tmp_path):
    """The preload unit restarting leaves the services running; each launcher stays until its
    service ends, then ends too (without the server's word on how: 1)."""
    sock, proc, server_log = server
    launcher, out = _launch(sock, tmp_path, None)
    try:
        pid = _wait_forked(server_log, launcher, out)
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        time.sleep(1)
        assert _alive(pid) and launcher.poll() is None, out.read_text()
        os.kill(pid, signal.SIGKILL)
        assert launcher.wait(30) == 1, out.read_text()
        assert "did not say how" in out.read_text(), out.read_text()
    finally:
        _end(launcher)


def _request(sock: Path, head: bytes, body: bytes, fds: list[int]) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(sock))
        socket.send_fds(s, [head], fds) if fds else s.sendall(head)
        # A head the server refuses (a length over its limit) is answered and the connection
        # closed at once: the rest may then meet a closed socket, and the answer is already here.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if body:
                s.sendall(body)
            if not fds:
                s.shutdown(socket.SHUT_WR)
        return s.makefile("rb").readline().decode().strip()


def test_bad_requests_are_refused_with_the_reason_and_the_server_keeps_serving(server, tmp_path):
    sock, proc, server_log = server
    fds = [0, 1, 2]
    hostile = [
        (b"not json at all", "not JSON"),
        (json.dumps({"service": "../../bin/sh", "args": [], "env": {}}).encode(), "is not a pykubelet service"),
        (json.dumps({"service": "probe", "args": "--root-dir /", "env": {}}).encode(), "args must be a list"),
        (json.dumps({"service": "probe", "args": [], "env": {"A=B": "x"}}).encode(), "env must map"),
    ]
    for body, reason in hostile:
        answer = _request(sock, struct.pack("!I", len(body)), body, fds)
        assert answer.startswith("error bad request") and reason in answer, (body, answer)
    too_big = _request(sock, struct.pack("!I", 1 << 30), b"", fds)
    assert "at most" in too_big, too_big
    no_fds = _request(sock, struct.pack("!I", 2), b"{}", [])
    assert "three file descriptors" in no_fds, no_fds
    assert proc.poll() is None
    # Still serving: a real launcher gets its service.
    launcher, out = _launch(sock, tmp_path, None)
    try:
        assert _alive(_wait_forked(server_log, launcher, out))
    finally:
        _end(launcher)


def test_a_sandbox_the_server_cannot_copy_is_run_by_the_launcher_itself(server, tmp_path):
    sock, _, _ = server
    proc = subprocess.Popen(["unshare", "--pid", "--fork", PY, "-m", "services.cli.main", "fork", "probe",
                             "--root-dir", str(tmp_path / "root"), "--nats-url", NO_BUS], cwd=REPO,
                            env=dict(os.environ, PYKUBELET_FORK_SOCKET=str(sock)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        seen = b""
        deadline = time.monotonic() + 60
        while b"event bus error" not in seen and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        text = seen.decode()
        assert "not forked from the preloaded services" in text and "pid namespace of its own" in text, text
        assert "event bus error" in text, text  # and the service runs all the same
    finally:
        proc.kill()
        proc.wait(10)


def test_with_no_server_the_launcher_runs_the_service_itself(tmp_path):
    proc = subprocess.Popen([PY, "-m", "services.cli.main", "fork", "probe", "--root-dir", str(tmp_path / "root"),
                             "--nats-url", NO_BUS], cwd=REPO,
                            env=dict(os.environ, PYKUBELET_FORK_SOCKET=str(tmp_path / "absent.sock")),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        first = proc.stdout.readline().decode()
        assert "not forked" in first and "no fork server" in first, first
        wait_for(lambda: b"event bus error" in proc.stdout.readline(), 60, "the probe running in the launcher")
        # The same process: the unit's main pid stays the one systemd started.
        assert Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"pykubelet probe")
    finally:
        proc.kill()
        proc.wait(10)
