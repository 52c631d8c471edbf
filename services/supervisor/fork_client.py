"""`pykubelet fork SERVICE FLAGS...`: a unit's launcher (services/supervisor/fork_server.py).

systemd starts this in the unit's cgroup and sandbox. It asks the fork server for the service and
waits until the forked child has taken on its sandbox. Then it becomes unit_waiter.sh, which stays
the unit's main process until the service ends and ends as it did. The service says READY=1
itself (the units' NotifyAccess=all).

When the server is not there or refuses, it says why on stderr (the unit's journal) and runs the
service itself: the node comes up either way, only with more memory.

It imports nothing heavy (the fork server imports its protocol from here, not the other way
round): it runs at every start of every unit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import NoReturn

from shared.host.process_sandbox import own_mdwe

DEFAULT_SOCKET = Path("/run/pykubelet/fork.sock")
CONNECT_TIMEOUT = 5.0
# The child reads this process's sandbox (seccomp filters included) before it answers.
ANSWER_TIMEOUT = 60.0
LENGTH = struct.Struct("!I")  # a request's length, before its JSON body
PASSED_ON = (signal.SIGTERM, signal.SIGINT)
WAITER = Path(__file__).with_name("unit_waiter.sh")
SHELL = "/bin/sh"
WAITER_CONN_FD = 3  # where unit_waiter.sh reads the server's word


class NotForked(Exception):
    """The server did not fork the service; the message says why."""


class Forked:
    """The service the server forked for this unit: its pid, a pidfd on it, and the connection on
    which the server says how it ended."""

    def __init__(self, pid: int, pidfd: int, conn: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.conn = conn

    def wait_as_unit_waiter(self, stops: list[int]) -> NoReturn:
        """Become the unit's main process for as long as the service runs (unit_waiter.sh); the
        stops asked meanwhile are passed on first."""
        # A shell cannot take over signals blocked across the exec (it never unblocks them), so
        # they are taken here until the exec and passed on; one sent during the exec itself ends
        # this process by the default action, and systemd's own stop signals the service too.
        signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)
        while (taken := signal.sigtimedwait(PASSED_ON, 0)) is not None:
            stops.append(taken.si_signo)
        for signum in stops:
            signal.pidfd_send_signal(self.pidfd, signum)
        if self.conn.fileno() != WAITER_CONN_FD:
            os.dup2(self.conn.fileno(), WAITER_CONN_FD)
        os.set_inheritable(WAITER_CONN_FD, True)  # the socket's own fd is close-on-exec
        for sig in PASSED_ON:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
        os.execv(SHELL, [SHELL, str(WAITER), str(self.pid), "1" if stops else "0"])


def request_fork(path: Path, service: str, args: list[str]) -> Forked:
    """Have the server fork `service` into this unit; raises NotForked with the reason."""
    body = json.dumps({"service": service, "args": args, "env": dict(os.environ), "mdwe": own_mdwe()}).encode()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(str(path))
    except OSError as exc:
        raise NotForked(f"no fork server at {path} ({exc.strerror or exc})") from exc
    try:
        try:
            socket.send_fds(sock, [LENGTH.pack(len(body))], [0, 1, 2])
            sock.sendall(body)
            sock.settimeout(ANSWER_TIMEOUT)
            answer = sock.makefile("rb").readline(4096).decode(errors="replace").strip()
        except OSError as exc:
            raise NotForked(f"fork server at {path} did not answer: {exc}") from exc
        kind, _, detail = answer.partition(" ")
        if kind != "pid" or not detail.isdigit():
            raise NotForked(f"fork server refused: {detail if kind == 'error' else answer or 'no answer'}")
        pid = int(detail)
        try:
            # The child waits for "done" before it runs the service: alive, so the pidfd is its.
            pidfd = os.pidfd_open(pid)
            sock.sendall(b"done\n")
        except OSError as exc:  # the child, not told, ends on its own
            raise NotForked(f"could not take over pid {pid}: {exc}") from exc
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return Forked(pid, pidfd, sock)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: pykubelet fork SERVICE [FLAGS...]", file=sys.stderr)
        return 2
    service, args = argv[0], argv[1:]
    path = Path(os.environ.get("PYKUBELET_FORK_SOCKET", str(DEFAULT_SOCKET)))
    # Set before the request: a stop asked while the child takes on the sandbox is not lost.
    pending: list[int] = []
    for sig in PASSED_ON:
        signal.signal(sig, lambda signum, _frame: pending.append(signum))
    try:
        child = request_fork(path, service, args)
    except NotForked as exc:
        for sig in PASSED_ON:
            signal.signal(sig, signal.SIG_DFL)
        if pending:
            return 128 + pending[0]
        where = ("`systemctl status pykubelet-preload` says why the server is not there" if "no fork server" in str(exc)
                 else "`journalctl -u pykubelet-preload` has the server's side")
        print(f"pykubelet {service}: not forked from the preloaded services: {exc}; starting it with an "
              f"interpreter of its own (more memory; {where})", file=sys.stderr, flush=True)
        os.execv(sys.executable, [sys.executable, "-m", "services.cli.main", service, *args])
    child.wait_as_unit_waiter(pending)
