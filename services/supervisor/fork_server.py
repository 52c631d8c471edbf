"""The preloaded parent of the systemd units' services (pykubelet-preload.service).

Under systemd every service is a unit of its own, and a unit's process used to be an interpreter
of its own that imported the whole stack: ~70 MiB each, seven times. This server imports it once
(forking.preload, as `pykubelet up` does) and forks each service from that state, so the
imported pages stay shared between all of them, while each service stays its unit's main process:
in the unit's cgroup, namespaces and sandbox, restarted, limited, stopped and logged by systemd
as before.

How a unit gets its process (the unit's ExecStart is `pykubelet fork SERVICE FLAGS...`,
services/supervisor/fork_client.py):
1. The launcher connects to this server's socket (root only: 0600 in a 0700 directory, and the
   peer's uid is checked) and hands over its stdin/stdout/stderr (the unit's journal stream),
   its environment (NOTIFY_SOCKET, CREDENTIALS_DIRECTORY, ...) and the service's flags.
2. The server forks. The child reads the launcher's sandbox and takes it on
   (shared/host/process_sandbox.py): cgroup, namespaces, limits, capabilities, seccomp filters.
3. The child tells the launcher its pid, and runs the service once the launcher has it. The
   launcher stays the unit's main process, passes a stop (SIGTERM) on to the child and, when the
   child has ended, ends as it did: this server reaps it and tells the launcher how it ended.
   The service says READY=1 itself.
A request the server cannot serve (a sandbox it cannot copy, no server running) is answered with
the reason; the launcher then runs the service itself, with an interpreter of its own.

The server's own loop is plain blocking code without threads: forking from it is always safe.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import select
import selectors
import signal
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NoReturn

from services.supervisor import forking
from services.supervisor.fork_client import DEFAULT_SOCKET, LENGTH
from shared.host.process_sandbox import ProcessSandbox, SandboxError, parse_status
from shared.process import sd_notify
from shared.process import title as process_title

log = logging.getLogger("pykubelet.fork-server")

MAX_REQUEST = 1 << 20  # flags and environment of a unit: a few KiB
HANDOVER_TIMEOUT = 20.0  # seconds the child waits for the launcher to hand the unit over
TITLE_ROOM_ENV = "PYKUBELET_TITLE_ROOM"
TITLE_ROOM = 4096


class RequestError(ValueError):
    """A request that is not one a launcher sends."""


@dataclass(frozen=True)
class Request:
    service: str
    args: list[str]
    env: dict[str, str]
    mdwe: int = 0  # the launcher's memory-deny-write-execute flags (process_sandbox.own_mdwe)


def parse_request(body: bytes) -> Request:
    """A launcher's request, checked."""
    try:
        request = json.loads(body)
    except ValueError as exc:
        raise RequestError(f"not JSON: {exc}") from exc
    if not isinstance(request, dict):
        raise RequestError("not a JSON object")
    service, args, env, mdwe = request.get("service"), request.get("args"), request.get("env"), request.get("mdwe", 0)
    if service not in forking.SERVICE_MAIN:
        raise RequestError(f"{service!r} is not a pykubelet service")
    if not isinstance(args, list) or not all(isinstance(a, str) and "\0" not in a for a in args):
        raise RequestError("args must be a list of strings")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) and "=" not in k
                                            and "\0" not in k + v for k, v in env.items()):
        raise RequestError("env must map names to strings")
    if not isinstance(mdwe, int) or isinstance(mdwe, bool) or not 0 <= mdwe < 1 << 16:
        raise RequestError("mdwe must be the launcher's PR_GET_MDWE flags")
    return Request(service, args, env, mdwe)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise RequestError("the launcher closed the connection mid-request")
        data += chunk
    return data


def receive(conn: socket.socket) -> tuple[Request, list[int]]:
    """One request: a length and the launcher's three standard streams, then the JSON body."""
    head, fds, _, _ = socket.recv_fds(conn, LENGTH.size, 3)
    try:
        if len(head) != LENGTH.size or len(fds) != 3:
            raise RequestError("a request starts with its length and three file descriptors")
        (size,) = LENGTH.unpack(head)
        if size > MAX_REQUEST:
            raise RequestError(f"request of {size} bytes (at most {MAX_REQUEST})")
        request = parse_request(_recv_exactly(conn, size))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds


def peer(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end."""
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid


def listen(path: Path) -> socket.socket:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(16)
    return sock


class ForkServer:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: dict[int, str] = {}
        # Each child's launcher, told how the child ended once it is reaped.
        self.launchers: dict[int, socket.socket] = {}
        self.stopping = False
        self._pipe: list[int] = []

    def serve(self) -> None:
        """Until SIGTERM: answer launchers and reap the services that ended."""
        read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._pipe = [read_end, write_end]
        signal.set_wakeup_fd(write_end)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ)
            selector.register(read_end, selectors.EVENT_READ)
            while not self.stopping:
                for key, _ in selector.select(timeout=5.0):
                    if key.fileobj is self.sock:
                        self._accept()
                    else:
                        while True:
                            try:
                                if not os.read(read_end, 512):
                                    break
                            except BlockingIOError:
                                break
                self._reap()
        log.info("fork server stopping; the services it started keep running in their units")

    def _forget(self) -> None:
        """In a child: close what only the server uses (its listening socket, its wake-up pipe, the
        other units' launchers: a launcher's connection ends only when no process holds its other
        end, the server and the launcher's own service)."""
        self.sock.close()
        for fd in self._pipe:
            os.close(fd)
        for conn in self.launchers.values():
            conn.close()

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            name = self.children.pop(pid, "?")
            log.info("%s (pid %d) ended: %s", name, pid, _describe(status))
            conn = self.launchers.pop(pid, None)
            if conn is not None:
                with conn:
                    _answer(conn, f"exit {os.waitstatus_to_exitcode(status)}")

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError as exc:
            log.warning("accept failed: %s", exc)
            return
        conn.settimeout(10.0)
        pid, uid = peer(conn)
        if uid != 0:
            log.warning("refused a request from uid %d (pid %d): only root may start services", uid, pid)
            conn.close()
            return
        try:
            request, fds = receive(conn)
        except (RequestError, OSError) as exc:
            log.warning("bad request from pid %d: %s", pid, exc)
            _answer(conn, f"error bad request: {exc}")
            conn.close()
            return
        try:
            child = forking.fork_bare(lambda: _serve_child(conn, pid, request, fds, self._forget))
        except (forking.ForkRefused, OSError) as exc:
            log.warning("cannot fork %s for pid %d: %s", request.service, pid, exc)
            _answer(conn, f"error {exc}")
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        self.children[child] = request.service
        conn.settimeout(1.0)  # the word on how the child ended is one short line
        self.launchers[child] = conn
        log.info("forked %s (pid %d) for its unit's launcher (pid %d)", request.service, child, pid)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _answer(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall(line.encode() + b"\n")
    except OSError:
        pass


def _serve_child(conn: socket.socket, launcher: int, request: Request, fds: list[int],
                 forget_server: Callable[[], None]) -> int:
    """In the forked child: take the launcher's place, then run the service."""
    forget_server()
    try:
        # Held across the reading: had the launcher ended meanwhile, its pid could name another
        # process whose sandbox this would take on. The pidfd says whether it is still the same.
        pidfd = os.pidfd_open(launcher)
        sandbox = ProcessSandbox.of(launcher)
        if select.select([pidfd], [], [], 0)[0]:
            raise SandboxError(f"the launcher (pid {launcher}) ended while its sandbox was read")
        sandbox.mdwe = request.mdwe
        sandbox.enter()
    except (SandboxError, OSError) as exc:
        _answer(conn, f"error cannot take on the unit's sandbox: {exc}")
        return 1
    _answer(conn, f"pid {os.getpid()}")
    conn.settimeout(HANDOVER_TIMEOUT)
    try:
        handed_over = conn.recv(16).startswith(b"done")
    except OSError:
        handed_over = False
    if not handed_over:  # the launcher is gone or failed: the unit does not know this process
        return 1
    # Kept open (close-on-exec) for as long as the service runs, never closed: the launcher's
    # waiter sees the connection end only once the service has ended, even when this server
    # has stopped meanwhile (unit_waiter.sh reads nothing else to know).
    conn.detach()
    os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request.env)
    forking.run_service(request.service, request.args)
    return 0


def make_title_room() -> None:
    """A forked service's command line (`pykubelet pod-sync --config ...`, what `ps` and kube-bench
    read) can only be as long as this process's command line and environment together: under
    systemd that is ~300 bytes, less than a service's flags. Run once more with room in the
    environment, before anything is imported."""
    if TITLE_ROOM_ENV in os.environ:
        return
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, TITLE_ROOM_ENV: "." * TITLE_ROOM})


def _own_seccomp_filters() -> int:
    try:
        return int(parse_status(Path("/proc/self/status").read_text()).get("Seccomp_filters", "0"))
    except (OSError, ValueError):
        return 0


def run(socket_path: Path, store_path: Path | None) -> int:
    """Preload, listen, tell systemd it is ready, serve until stopped."""
    forking.preload(cluster_mode=True, store_path=store_path)
    try:
        sock = listen(socket_path)
    except OSError as exc:
        log.error("cannot listen on %s: %s", socket_path, exc)
        return 1
    filters = _own_seccomp_filters()
    if filters:
        log.warning("this process runs under seccomp filters (%d; a container's?), and a filtered process cannot read "
                    "another's: a unit with filters of its own (SystemCallFilter=, ...) is refused and its launcher "
                    "runs the service itself", filters)
    sd_notify.notify("READY=1")
    log.info("fork server ready on %s", socket_path)
    try:
        ForkServer(sock).serve()
    finally:
        sock.close()
        try:
            socket_path.unlink()
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.warning("could not remove %s: %s", socket_path, exc)
    return 0


def main(argv: list[str]) -> NoReturn:
    import argparse

    p = argparse.ArgumentParser(prog="pykubelet fork-server",
                                description="Preload the services once and fork each unit's service from it.")
    p.add_argument("--socket", type=Path, default=DEFAULT_SOCKET, help=f"where launchers connect ({DEFAULT_SOCKET})")
    p.add_argument("--root-dir", type=Path, default=None,
                   help="the node's root directory: its store is opened once here, before the forks")
    args = p.parse_args(argv)
    make_title_room()
    # Now, while the environment is the server's: setproctitle takes over the memory of the command
    # line and the environment here, and every forked service titles itself within it.
    process_title.set_title("fork-server", argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    store = args.root_dir / "state.db" if args.root_dir and (args.root_dir / "state.db").exists() else None
    sys.exit(run(args.socket, store))
