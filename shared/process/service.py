"""The life of one pykubelet service process: wiring, named tasks, signals, clean shutdown."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine, Generator

import uvicorn
from sqlalchemy.exc import DatabaseError

from shared.bus.auth import BUS_DIR, Credentials, credentials_file, read_credentials
from shared.bus.client import Bus
from shared.config.settings import ConfigError, NodeSettings, add_node_flags, settings_from_args
from shared.host import kubelet_cgroup
from shared.host.node_dirs import private_umask, root_dir
from shared.model.redact import secret_values
from shared.model.version import version_line
from shared.process import log_verbosity, self_limits
from shared.process.admin import AdminApp, Check, admin_port
from shared.process.admin_token import ensure_token
from shared.process.log_format import hold_early_logs, setup_logging
from shared.process.loop_watchdog import watching
from shared.process.sd_notify import notify
from shared.store import DesiredPod, Store
from shared.store.db import is_corruption
from shared.store.service_state import HEARTBEAT_PERIOD, ServiceStateWriter, view_freshness
from shared.tracing import spans as tracing

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT = 20.0
# How often a service checks that it is still in kubeletCgroups (the kubelet: every minute).
KUBELET_CGROUPS_PERIOD = 60.0
ADMIN_START_TIMEOUT = 30.0


@dataclass
class ServiceContext:
    """What a service's setup function gets to build its managers from."""

    name: str
    settings: NodeSettings
    store: Store
    bus: Bus
    app: AdminApp
    checks: dict[str, Check]
    stopping: asyncio.Event
    state: ServiceStateWriter
    admin_token: str  # what asks another service's admin app (node-api's /metrics merge) sends
    _tasks: list[asyncio.Task[object]] = field(default_factory=list)
    _cleanups: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    _may_finish: set[asyncio.Task[object]] = field(default_factory=set)
    failed: bool = False

    def spawn(self, name: str, coro: Coroutine[Any, Any, object], *, may_finish: bool = False) -> asyncio.Task[object]:
        """Run a long-lived coroutine; if it ever fails, log it and stop the process. It must
        not return either, unless may_finish (a step done once, such as the TLS bootstrap)."""
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        if may_finish:
            self._may_finish.add(task)
        task.add_done_callback(self._on_task_done)
        self._tasks.append(task)
        return task

    def synced(self) -> None:
        """Call after each complete reconcile of what this service owns: `pykubelet status` and
        /readyz treat its rows as current from the first call on."""
        self.state.synced()

    def on_shutdown(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._cleanups.append(fn)

    def _on_task_done(self, task: asyncio.Task[object]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("task %s failed; stopping so the supervisor restarts this service",
                      task.get_name(), exc_info=exc)
            self.failed = True
            self.stopping.set()
        elif task in self._may_finish:
            self._may_finish.discard(task)
        elif not self.stopping.is_set():
            log.error("task %s returned unexpectedly; stopping", task.get_name())
            self.failed = True
            self.stopping.set()


Setup = Callable[[ServiceContext], Awaitable[None]]


class _AdminServer(uvicorn.Server):
    """uvicorn's server without its signal handling: signals are ours (run_service's handler sets
    `stopping`; _serve_admin then stops this server). uvicorn >= 0.29 takes SIGINT/SIGTERM for the
    whole of serve() in capture_signals(), stops at the first one, and raises it again on return."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit_requested = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def main_loop(self) -> None:
        """uvicorn's own loop wakes ten times a second to refresh its Date header and look at
        should_exit: for seven idle admin servers, a measurable share of an idle node's CPU.
        One tick sets the default headers (the config has no Date header); then sleep until
        stop()."""
        await self.on_tick(0)
        await self._exit_requested.wait()

    def stop(self) -> None:
        self.should_exit = True
        self._exit_requested.set()


async def _serve_admin(ctx: ServiceContext, port: int) -> None:
    # log_config=None: uvicorn's loggers go to the service's own handler (one format in the log)
    # instead of a logging.config.dictConfig run of their own in every service.
    config = uvicorn.Config(ctx.app, host="127.0.0.1", port=port, log_level="warning", log_config=None,
                            lifespan="off", access_log=False, date_header=False)
    server = _AdminServer(config)
    serve = asyncio.create_task(server.serve(), name=f"{ctx.name}:admin-http")
    # Ready for systemd (Type=notify) once /healthz answers, as `pykubelet up` judges it.
    deadline = asyncio.get_running_loop().time() + ADMIN_START_TIMEOUT
    while not server.started and not serve.done() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    if server.started:
        notify("READY=1")
    else:
        log.error("admin server on port %d did not start within %.0fs", port, ADMIN_START_TIMEOUT)
        ctx.failed = True
        ctx.stopping.set()
    await ctx.stopping.wait()
    notify("STOPPING=1")
    server.stop()
    await asyncio.wait_for(serve, timeout=5)


class StoreReplaced(RuntimeError):
    pass


@dataclass
class StoreHealth:
    """Whether this service can write the store, as its heartbeat last found (a readiness check)."""

    problem: str = ""

    def check(self) -> tuple[bool, str]:
        return not self.problem, self.problem or "writable"


async def _heartbeat(store: Store, state: ServiceStateWriter, health: StoreHealth) -> None:
    """The service's heartbeat in the store. A damaged store, or one another service has
    rebuilt, fails this task: the service stops and its restart opens a good store. Other
    write failures (a full disk) are logged once, shown by /readyz, and waited out; the service
    keeps running."""
    while True:
        await asyncio.sleep(HEARTBEAT_PERIOD)
        if store.replaced():
            raise StoreReplaced(f"{store.path} was replaced (rebuilt after damage); restarting to use the new one")
        try:
            await state.heartbeat()
        except DatabaseError as exc:
            if is_corruption(exc):
                raise
            if not health.problem:
                log.warning("cannot write to the store (%s); retrying every %.0fs", exc.orig, HEARTBEAT_PERIOD)
            health.problem = f"cannot write to the store {store.path}: {exc.orig}"
            continue
        if health.problem:
            log.info("store writes work again")
        health.problem = ""


def pod_secrets(store: Store) -> set[str]:
    """The env and header values of every pod the node has: what no admin view may quote. Read
    only when a view is asked for."""
    return secret_values([row["manifest"] for row in store.read_rows(DesiredPod)])


def bus_credentials(name: str, settings: NodeSettings) -> Credentials | None:
    """--bus-credentials, else the file the supervisor writes under the root dir, else none."""
    path = settings.bus_credentials or credentials_file(settings.root_dir / BUS_DIR, name)
    if settings.bus_credentials is None and not path.exists():
        return None
    return read_credentials(path)


def _open_store(name: str, settings: NodeSettings) -> tuple[Store, ServiceStateWriter]:
    store = Store(settings.store_path, writer=name)
    store.create_schema()
    state = ServiceStateWriter(store, name)
    state.started()
    return store, state


async def _unless_stopped(step: Coroutine[Any, Any, object], stopping: asyncio.Event, task_name: str) -> bool:
    """Run step until it ends (True; its error is raised) or a stop is asked (False: step is
    cancelled)."""
    task = asyncio.create_task(step, name=task_name)
    stop = asyncio.create_task(stopping.wait(), name=f"{task_name}:stop")
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return False


async def _keep_in_kubelet_cgroups(name: str, cgroup: str) -> None:
    """kubeletCgroups: back into it every minute, as the kubelet checks its own process."""
    while True:
        await asyncio.sleep(KUBELET_CGROUPS_PERIOD)
        try:
            moved_from = kubelet_cgroup.move_self(cgroup, name)
        except kubelet_cgroup.KubeletCgroupError as exc:
            log.warning("%s", exc)
            continue
        if moved_from:
            log.info("%s moved back into kubeletCgroups %s from %s", name, cgroup, moved_from)


async def run_service(name: str, settings: NodeSettings, setup: Setup) -> int:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    cgroup = settings.kubelet.kubelet_cgroups
    if cgroup:  # first: what the service does from here on is accounted there
        try:
            moved_from = kubelet_cgroup.move_self(cgroup, name)
        except kubelet_cgroup.KubeletCgroupError as exc:
            raise ConfigError(str(exc)) from None
        if moved_from:
            log.info("%s moved into kubeletCgroups %s from %s", name, cgroup, moved_from)

    root_dir(settings.root_dir)
    # Every service of a node opens the store at the same moment; a write that waits out
    # another's lock (SQLite's busy timeout sleeps) must not hold this service's loop.
    store, state = await asyncio.to_thread(_open_store, name, settings)
    creds = bus_credentials(name, settings)
    bus = Bus(settings.nats_url, name=f"pykubelet-{name}", user=creds.user if creds else "",
              password=creds.password if creds else "")
    if not await _unless_stopped(bus.connect(), stopping, f"{name}:bus-connect"):
        # A stop asked while the bus does not answer (nats-server not up yet) ends the wait:
        # `systemctl stop` must not wait out the connect timeout.
        log.info("%s stopped before the event bus at %s answered", name, settings.nats_url)
        with contextlib.suppress(Exception):  # as at the end of a run: the stop goes on
            state.stopped()
        await bus.close()
        store.close()
        return 0
    checks: dict[str, Check] = {
        "bus": lambda: (bus.connected, "connected" if bus.connected else f"not connected to {settings.nats_url}"),
        "reconciled": lambda: (state.reconciled, "reconciled since start" if state.reconciled
                               else "not reconciled since start yet"),
    }
    token = ensure_token(settings.root_dir)
    app = AdminApp(name, checks, token=token, freshness=lambda: view_freshness(store, name),
                   secrets=lambda: pod_secrets(store))
    ctx = ServiceContext(name=name, settings=settings, store=store, bus=bus, app=app,
                         checks=checks, stopping=stopping, state=state, admin_token=token)
    # The verbosity set through the kubelet API (PUT /debug/flags/v), before the service logs much.
    await log_verbosity.follow(store, bus, settings.kubelet.logging.verbosity)
    if settings.kubelet.tracing is not None:  # before setup: the runtime's channels open traced
        tracing.start(settings.kubelet.tracing, settings.node_name, name)
    await setup(ctx)
    store_health = StoreHealth()
    checks["store"] = store_health.check
    if cgroup:
        ctx.spawn("kubelet-cgroups", _keep_in_kubelet_cgroups(name, cgroup))
    ctx.spawn("heartbeat", _heartbeat(store, state, store_health))
    port = settings.admin_port or admin_port(name, settings.admin_port_base)
    admin = asyncio.create_task(_serve_admin(ctx, port), name=f"{name}:admin")
    log.info("%s running (admin http://127.0.0.1:%d, store %s, bus %s)", name, port,
             settings.store_path, settings.nats_url)

    await stopping.wait()
    log.info("%s stopping", name)
    for task in ctx._tasks:
        task.cancel()
    await asyncio.wait_for(asyncio.gather(*ctx._tasks, return_exceptions=True), SHUTDOWN_TIMEOUT)
    for fn in reversed(ctx._cleanups):
        try:
            await asyncio.wait_for(fn(), SHUTDOWN_TIMEOUT)
        except Exception:
            log.exception("shutdown step failed")
    try:
        await asyncio.wait_for(admin, 5)
    except Exception as exc:
        log.warning("admin server did not stop cleanly: %s", exc)
    await asyncio.to_thread(tracing.stop)
    try:
        state.stopped()
    except Exception as exc:  # a full disk must not keep the service from stopping
        log.warning("could not record the stop in the store: %s", exc)
    await bus.close()
    store.close()
    log.info("%s stopped", name)
    return 1 if ctx.failed else 0


def service_main(name: str, setup: Setup, argv: list[str] | None = None) -> int:
    """Entry point shared by all services: parse flags, load config, run until a signal."""
    private_umask()  # before the service opens anything: its files are private from creation
    parser = argparse.ArgumentParser(prog=f"pykubelet {name}", allow_abbrev=False)
    add_node_flags(parser)
    args = parser.parse_args(argv)
    if args.kf_version:
        print(version_line())
        return 0
    early = hold_early_logs()
    try:
        settings = settings_from_args(args)
    except ConfigError as exc:
        setup_logging(name, early=early)
        print(f"pykubelet {name}: {exc}", file=sys.stderr)
        return 2
    setup_logging(name, settings.kubelet.logging.format, settings.kubelet.logging.verbosity, early)
    self_limits.apply(self_limits.from_config(settings.kubelet))
    try:
        # Every service's loop, forked by `pykubelet up` or exec'd, runs here: the tests' watchdog
        # for blocking callbacks (PYKUBELET_LOOP_WATCHDOG) starts here too.
        with watching(name):
            return asyncio.run(run_service(name, settings, setup))
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    except ConnectionError as exc:
        log.error("%s", exc)
        return 1
