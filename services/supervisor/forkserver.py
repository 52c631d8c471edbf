"""The fork server `pykubelet up` starts its services from.

Each service imports the same stack (FastAPI and uvicorn, SQLAlchemy, grpc, nats-py, in cluster
mode the Kubernetes client): on its own, every process pays ~70-110 MiB for it. Here one process
imports it once, takes the imported objects out of the garbage collector's reach (gc.freeze: a
collection writes to every object it scans, which would copy the shared pages) and forks each
service from that state. The pages stay shared copy-on-write; each service pays only for what it
changes. The services stay separate processes, with their own pids, sessions, logs and restarts.

The server is forked from `pykubelet up` before the supervisor starts its event loop or any
thread: it holds no loop, no thread and no gRPC channel, which a fork cannot copy safely. It
talks to the supervisor over a private socket pair (inherited, no listener), one JSON object per
line:

    {"op": "spawn", "name": SERVICE, "args": [...], "log": PATH, "env": {...}}
        -> {"pid": N} or {"error": "..."}
    {"op": "signal", "pid": N, "signal": S}
        delivered only to a child not yet reaped, so never to a recycled pid
    <- {"exited": N, "code": C} when a child ends (C: exit code, or -signal)

It exits when the supervisor's end closes (the supervisor died or stopped); the services it
forked keep running, as services do when the supervisor dies.
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import NoReturn

import sqlalchemy.orm

from services.supervisor import metric_owners
from shared.admin import SERVICES
from shared.store import Store
from shared.store.db import prepare_engine_for_fork
from shared.store.warm_up import warm_up

log = logging.getLogger(__name__)

# What every service imports (each service's __main__ pulls in its own modules and the shared
# stack), and in cluster mode the modules it imports only then (the API client and kubeconfig loader).
SERVICE_MAIN = {s: f"services.{s.replace('-', '_')}.__main__" for s in SERVICES}
CLUSTER_MODULES = [
    "shared.kube", "shared.kubeconfig",
    "services.pod_sync.api_source", "services.pod_sync.env_sources",
    "services.status_reporter.api_pods", "services.status_reporter.events",
    "services.status_reporter.mirror_pods", "services.status_reporter.node_agent",
    "services.network.node_cidr", "services.volume.api_objects", "services.node_api.apiserver",
]
# Imported by the services only once they run (asyncio backends, the SQLite dialect, uvicorn's
# protocol classes, the kubelet API's certificate code): imported here, they are shared too. Each
# one missed is a private copy in every service. FastAPI is not among them: a service imports it
# when the first of its admin views is asked for (shared/admin.py); preloaded, its ~14 MiB would
# be paid on every node for views that are rarely opened.
RUNTIME_MODULES = [
    "anyio._backends._asyncio", "concurrent.futures.thread", "encodings.idna",
    "sqlalchemy.dialects.sqlite.pysqlite", "uvicorn.lifespan.off", "uvicorn.protocols.http.auto",
    "uvicorn.protocols.http.h11_impl", "uvicorn.protocols.websockets.auto", "httpcore", "cryptography.x509",
]
MAX_MESSAGE = 1 << 20


class ForkServerError(RuntimeError):
    pass


def preload(cluster_mode: bool, store_path: Path | None = None) -> None:
    """Import what the services share, prepare the store they all open (store_path), then
    freeze it (call before forking the server)."""
    gc.disable()  # no collection between the imports and the freeze: no holes in shared pages
    import setproctitle  # noqa: F401  (the forked services set their title with it)

    with metric_owners.recording():
        for module in [*SERVICE_MAIN.values(), *RUNTIME_MODULES, *(CLUSTER_MODULES if cluster_mode else [])]:
            importlib.import_module(module)
    # The ORM's mapper setup happens at first use; done here, each service inherits it.
    sqlalchemy.orm.configure_mappers()
    if store_path is not None:
        _prepare_store(store_path)
    if threading.active_count() != 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        raise ForkServerError(f"importing the services started threads ({names}); a fork would not copy them")
    gc.freeze()
    gc.enable()


def _prepare_store(path: Path) -> None:
    """The store engine every service opens, made and warmed here (shared/store/warm_up.py)."""
    engine = prepare_engine_for_fork(path)
    try:
        Store(path, writer=None).create_schema()  # on the prepared engine
    except Exception as exc:  # the services will say what is wrong with the store
        log.warning("store %s not prepared before forking the services: %s", path, exc)
        engine.dispose()
        return
    warm_up(engine)


def start(cluster_mode: bool, title: str, store_path: Path | None = None) -> tuple[int, socket.socket]:
    """Preload, fork the server; return its pid and the supervisor's end of the socket pair."""
    preload(cluster_mode, store_path)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            import setproctitle

            setproctitle.setproctitle(title)
            serve(theirs)
        except BaseException:
            traceback.print_exc()
        os._exit(1)
    theirs.close()
    return pid, ours


def serve(sock: socket.socket) -> NoReturn:
    """Answer the supervisor on sock until it closes its end."""
    _Server(sock).run()


class _Server:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: set[int] = set()
        self.wake_r, self.wake_w = os.pipe()

    def run(self) -> NoReturn:
        # Own session: a Ctrl-C in the terminal reaches only the supervisor, which stops the
        # services in order (it needs this server to hear them exit).
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd does the work
        signal.set_wakeup_fd(self.wake_w)
        buf = b""
        while True:
            ready, _, _ = select.select([self.sock, self.wake_r], [], [])
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
                self._reap()
            if self.sock in ready:
                data = self.sock.recv(65536)
                if not data:
                    os._exit(0)
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._handle(line)
                if len(buf) > MAX_MESSAGE:
                    os._exit(2)  # not the supervisor talking

    def _send(self, msg: dict[str, object]) -> None:
        try:
            self.sock.sendall(json.dumps(msg).encode() + b"\n")
        except OSError:
            os._exit(0)  # the supervisor is gone

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self._send({"exited": pid, "code": os.waitstatus_to_exitcode(status)})

    def _handle(self, line: bytes) -> None:
        try:
            req = json.loads(line)
            op = req["op"]
            if op == "spawn":
                self._send({"pid": self._spawn(req["name"], req["args"], req["log"], req["env"])})
            elif op == "signal":
                pid, sig = int(req["pid"]), int(req["signal"])
                if pid in self.children and sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
                    os.kill(pid, sig)
        except (ValueError, KeyError, TypeError, OSError, ForkServerError) as exc:
            self._send({"error": f"{type(exc).__name__}: {exc}"})

    def _spawn(self, name: str, args: list[str], log_path: str, env: dict[str, str]) -> int:
        if name not in SERVICE_MAIN:
            raise ForkServerError(f"{name!r} is not a pykubelet service")
        if not all(isinstance(a, str) for a in args) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ForkServerError("arguments and environment must be strings")
        # Opened here, so a bad log path is an error for the supervisor, not a dead child.
        log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            pid = os.fork()
            if pid == 0:
                self._become(name, args, log_fd, env)
        finally:
            os.close(log_fd)
        self.children.add(pid)
        return pid

    def _become(self, name: str, args: list[str], log_fd: int, env: dict[str, str]) -> NoReturn:
        """In the forked child: drop the server's state and run the service as `python -m` would."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.sock.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.environ.update(env)
            for handler in logging.root.handlers[:]:  # the supervisor's; the service sets up its own
                logging.root.removeHandler(handler)
            argv = [f"pykubelet {name}", *args]
            import setproctitle

            # `ps` and the leftover check (services/supervisor/leftovers.py) read the command line.
            setproctitle.setproctitle(" ".join(argv))
            metric_owners.keep_only(name)
            module = SERVICE_MAIN[name]
            sys.modules.pop(module, None)  # run afresh as __main__, as `python -m` does
            sys.argv = argv
            runpy.run_module(module.removesuffix(".__main__"), run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)
