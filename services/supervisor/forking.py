"""`pykubelet up` forks its services from itself.

Each service imports the same stack (uvicorn, SQLAlchemy, grpc, nats-py, pydantic, in cluster
mode the API client): on its own, every process pays ~70-110 MiB for it. `pykubelet up` imports
it once (preload), takes the imported objects out of the garbage collector's reach (gc.freeze: a
collection writes to every object it scans, which would copy the shared pages) and forks each
service from that state. The pages stay shared copy-on-write; each service pays only for what it
writes. The services stay separate processes, with their own pids, sessions, logs and restarts.

The supervisor forks them itself, from its event loop, rather than from a separate fork server
that idles with the preloaded pages: every page all the services write would have one more copy
there (~8 MiB). Forking a process that runs an event loop is safe only under three rules, which
spawn() checks or enforces every time:
- The supervisor has no thread but its main one (a fork copies only the calling thread; a lock
  another thread held stays locked in the child for ever): asyncio watches its subprocesses
  through pidfds, not waiter threads, and every address it connects to is numeric (no resolver
  thread). If a thread is found anyway, the service is exec'd instead and the reason logged.
- The supervisor never initializes gRPC, whose core (threads, pollers, timers) a fork cannot
  copy: it asks the container runtime from a forked child of its own (check_in_child).
- Signals are blocked across the fork: the child starts with the supervisor's signal handlers and
  its wake-up fd, so a SIGTERM meant for the new service would otherwise reach the supervisor's
  loop. The child drops them before unblocking.
The child keeps the supervisor's other file descriptors (its epoll instance, pidfds): Python
objects of the supervisor's that it inherits may close them when collected, so closing them
under those objects could close a descriptor the service opened since. Nothing in it uses them.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, NoReturn

import sqlalchemy.orm

from services.supervisor import immortal, metric_owners
from shared.host.node_dirs import open_private_log
from shared.process import title as process_title
from shared.process.admin import SERVICES
from shared.store import Store
from shared.store.db import prepare_engine_for_fork
from shared.store.warm_up import warm_up

log = logging.getLogger(__name__)

# What every service imports (each service's __main__ pulls in its own modules and the shared
# stack), and in cluster mode the modules it imports only then (the API client and kubeconfig loader).
SERVICE_MAIN = {s: f"services.{s.replace('-', '_')}.__main__" for s in SERVICES}
CLUSTER_MODULES = [
    "shared.api.client", "shared.api.kubeconfig",
    "services.pod_sync.api_source", "services.pod_sync.env_sources",
    "services.status_reporter.api_pods", "services.status_reporter.events",
    "services.status_reporter.mirror_pods", "services.status_reporter.node_agent",
    "services.network.node_cidr", "services.volume.api_objects", "services.node_api.apiserver",
]
# Imported by the services only once they run (asyncio backends, the SQLite dialect, uvicorn's
# protocol classes, the kubelet API's certificate code): imported here, they are shared too. Each
# one missed is a private copy in every service. FastAPI is not among them: a service imports it
# when the first of its admin views is asked for (shared/process/admin.py); preloaded, its ~14 MiB would
# be paid on every node for views that are rarely opened.
RUNTIME_MODULES = [
    "anyio._backends._asyncio", "concurrent.futures.thread", "encodings.idna",
    "sqlalchemy.dialects.sqlite.pysqlite", "uvicorn.lifespan.off", "uvicorn.protocols.http.auto",
    "uvicorn.protocols.http.h11_impl", "uvicorn.protocols.websockets.auto", "httpcore", "cryptography.x509",
]
# A child that ends with an exception it did not report itself.
CODE_FAILED = 1


class ForkRefused(RuntimeError):
    """Forking now would not be safe (see the module's docstring); exec instead."""


def preload(cluster_mode: bool, store_path: Path | None = None) -> None:
    """Import what the services share, prepare the store they all open (store_path), then
    freeze it. Call before the event loop starts and before any thread exists."""
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
        raise ForkRefused(f"importing the services started threads ({names}); a fork would not copy them")
    # Before the freeze: frozen objects are not listed by the collector any more.
    marks = immortal.immortalize_all()
    gc.freeze()
    gc.enable()
    if marks:
        log.debug("preloaded objects marked immortal (%d marks)", marks)


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


def threads_running() -> int:
    """Every thread of this process, Python's and native ones (gRPC's, a C library's)."""
    return len(os.listdir("/proc/self/task"))


def fork_refusal() -> str | None:
    """Why a fork now would not be safe, or None."""
    threads = threads_running()
    if threads != 1:
        return f"the forking process runs {threads - 1} other thread(s)"
    return None


def fork_bare(child: Callable[[], int]) -> int:
    """Fork, run child() in the child and exit with its code; the child's pid here."""
    why = fork_refusal()
    if why:
        raise ForkRefused(why)
    sys.stdout.flush()
    sys.stderr.flush()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = os.fork()
        if pid == 0:
            _run_child(child, previous)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return pid


class ForkedProcess:
    """A forked child as the supervisor watches it: what an asyncio subprocess offers (pid,
    returncode, wait, send_signal, kill). Its exit is seen through a pidfd; until it is reaped
    its pid cannot be reused, so a signal always reaches this process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._pidfd = os.pidfd_open(pid)
        self._loop.add_reader(self._pidfd, self._reap)

    def _reap(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: its code is lost
            pid, status = self.pid, CODE_FAILED << 8
        if pid == 0:
            return
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self.returncode = os.waitstatus_to_exitcode(status)
        self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Forker:
    """Forks services (and one-off checks) from this process, which preloaded their code."""

    def __init__(self, preloaded_in: float = 0.0) -> None:
        self.preloaded_in = preloaded_in

    @classmethod
    def prepare(cls, cluster_mode: bool, store_path: Path | None = None) -> Forker:
        started = time.monotonic()
        preload(cluster_mode, store_path)
        return cls(time.monotonic() - started)

    def refusal(self) -> str | None:
        """Why a fork now would not be safe, or None."""
        return fork_refusal()

    def _fork(self, child: Callable[[], int]) -> int:
        return fork_bare(child)

    async def spawn(self, name: str, args: list[str], log_file: Path, env: dict[str, str]) -> ForkedProcess:
        """Fork the service `name` with these arguments, its output to log_file."""
        if name not in SERVICE_MAIN:
            raise ValueError(f"{name!r} is not a pykubelet service")
        # Opened here, so a bad log path is the supervisor's error, not a dead child.
        log_fd = open_private_log(log_file)
        try:
            pid = self._fork(lambda: _become(name, args, log_fd, env))
        finally:
            os.close(log_fd)
        return ForkedProcess(pid)

    async def check_in_child(self, check: Callable[[], bool], timeout: float) -> bool:
        """Run check() in a forked child and say whether it returned True (False when it
        failed or took longer than timeout): for work the supervisor must not do itself (gRPC)."""
        proc = ForkedProcess(self._fork(lambda: 0 if check() else 1))
        try:
            return await asyncio.wait_for(proc.wait(), timeout) == 0
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return False


def _run_child(child: Callable[[], int], signal_mask: set[int | signal.Signals]) -> NoReturn:
    """In a forked child: drop what belongs to the supervisor, run child(), exit with its code."""
    code = CODE_FAILED
    try:
        signal.set_wakeup_fd(-1)  # the supervisor loop's: signals from here on are this child's
        for sig in signal.valid_signals():
            handler = signal.getsignal(sig)
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
        # A fresh policy: asyncio.run() here makes a loop and a child watcher of the child's own.
        asyncio.set_event_loop_policy(None)
        # What the supervisor made since the preload: left alone by this child's collections.
        gc.freeze()
        code = child()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else CODE_FAILED)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _become(name: str, args: list[str], log_fd: int, env: dict[str, str]) -> int:
    """Turn the forked child into the service, as `python -m` would run it; its exit code."""
    os.setsid()  # its own session, as an exec'd service has: a Ctrl-C reaches only the supervisor
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.environ.update(env)
    run_service(name, args)
    return 0


def run_service(name: str, args: list[str]) -> None:
    """Run the preloaded service `name` in this forked process, as `python -m` would."""
    for handler in logging.root.handlers[:]:  # the forking process's; the service sets up its own
        logging.root.removeHandler(handler)
    argv = [f"pykubelet {name}", *args]
    # `ps` and the leftover check (services/supervisor/leftovers.py) read the command line.
    process_title.set_title(name, args)
    metric_owners.keep_only(name)
    module = SERVICE_MAIN[name]
    sys.modules.pop(module, None)  # run afresh as __main__, as `python -m` does
    sys.argv = argv
    runpy.run_module(module.removesuffix(".__main__"), run_name="__main__", alter_sys=True)
