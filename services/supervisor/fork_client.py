"""`pykubelet fork SERVICE FLAGS...`: a unit's launcher (services/supervisor/fork_server.py).

systemd starts this in the unit's cgroup and sandbox. It asks the fork server for the service,
waits until the forked child has taken on its sandbox, tells systemd the child is the unit's main
process (MAINPID=) and exits. When the server is not there or refuses, it says why on stderr (the
unit's journal) and runs the service itself: the node comes up either way, only with more memory.

It imports nothing heavy (the fork server imports its protocol from here, not the other way
round): it runs for a moment at every start of every unit.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from pathlib import Path

from shared.host.process_sandbox import own_mdwe
from shared.process import sd_notify

DEFAULT_SOCKET = Path("/run/pykubelet/fork.sock")
CONNECT_TIMEOUT = 5.0
# The child reads this process's sandbox (seccomp filters included) before it answers.
ANSWER_TIMEOUT = 60.0
LENGTH = struct.Struct("!I")  # a request's length, before its JSON body


class NotForked(Exception):
    """The server did not fork the service; the message says why."""


def request_fork(path: Path, service: str, args: list[str]) -> int:
    """Have the server fork `service`; once the child runs in this unit, make it the unit's main
    process. Returns the child's pid; raises NotForked with the reason."""
    body = json.dumps({"service": service, "args": args, "env": dict(os.environ), "mdwe": own_mdwe()}).encode()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(CONNECT_TIMEOUT)
        sock.connect(str(path))
    except OSError as exc:
        raise NotForked(f"no fork server at {path} ({exc.strerror or exc})") from exc
    with sock:
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
            if os.environ.get("NOTIFY_SOCKET") and not sd_notify.notify(f"MAINPID={pid}"):
                raise OSError(f"systemd's notify socket {os.environ['NOTIFY_SOCKET']} refused MAINPID=")
            sock.sendall(b"done\n")
        except OSError as exc:  # the child, not told, ends on its own
            raise NotForked(f"could not hand the unit over to pid {pid}: {exc}") from exc
    return pid


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: pykubelet fork SERVICE [FLAGS...]", file=sys.stderr)
        return 2
    service, args = argv[0], argv[1:]
    path = Path(os.environ.get("PYKUBELET_FORK_SOCKET", str(DEFAULT_SOCKET)))
    try:
        request_fork(path, service, args)
        return 0
    except NotForked as exc:
        where = ("`systemctl status pykubelet-preload` says why the server is not there" if "no fork server" in str(exc)
                 else "`journalctl -u pykubelet-preload` has the server's side")
        print(f"pykubelet {service}: not forked from the preloaded services: {exc}; starting it with an "
              f"interpreter of its own (more memory; {where})", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "services.cli.main", service, *args])
