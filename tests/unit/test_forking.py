"""`pykubelet up` forking its services from itself, in a fresh interpreter of its own (forking the
test process would copy its threads): services forked with their arguments, log, environment and
title from a running event loop; exits and signals; a signal for a new service never reaches the
supervisor; no fork while another thread runs; checks run in a child."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib

from services.supervisor import forking, immortal
from tests.integration.conftest import REPO


def supervise(script: str, *args: str, timeout: float = 120) -> dict:
    """Run script as a supervisor would (an event loop, a SIGTERM handler) in a fresh
    interpreter; it prints one JSON object of what it saw."""
    prologue = """
import asyncio, json, os, signal, sys, threading, time
from pathlib import Path
from services.supervisor.forking import Forker, ForkRefused, threads_running
"""
    out = subprocess.run([sys.executable, "-c", prologue + script, *args], cwd=REPO, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


SPAWN = """
async def main():
    tmp = Path(sys.argv[1])
    forker, seen = Forker(), {}
    log = tmp / "eviction.log"
    child = await forker.spawn("eviction", ["--root-dir", str(tmp), "--help"], log, {"PYKUBELET_TEST": "1"})
    seen["help_code"] = await asyncio.wait_for(child.wait(), 60)
    seen["help_log"] = log.read_text()
    # A service that keeps running: its title says what it is; a signal ends it.
    child = await forker.spawn("eviction", ["--root-dir", str(tmp), "--nats-url", "nats://127.0.0.1:1"], log, {})
    await asyncio.sleep(1.0)
    seen["title"] = Path(f"/proc/{child.pid}/cmdline").read_bytes().replace(bytes(1), b" ").decode().strip()
    seen["comm"] = Path(f"/proc/{child.pid}/comm").read_text().strip()
    seen["own_session"] = os.getsid(child.pid) == child.pid
    seen["parent"] = int(Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()
    child.kill()
    seen["kill_code"] = await asyncio.wait_for(child.wait(), 10)
    try:
        await forker.spawn("../../bin/sh", [], log, {})
    except ValueError as exc:
        seen["not_a_service"] = str(exc)
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_a_service_is_forked_with_its_arguments_log_and_environment(tmp_path):
    seen = supervise(SPAWN, str(tmp_path))
    assert seen["help_code"] == 0 and "usage: pykubelet eviction" in seen["help_log"]
    assert seen["title"].startswith(f"pykubelet eviction --root-dir {tmp_path} ")
    assert seen["comm"] == "pykubelet"  # what `ps -C pykubelet` and CIS scanners match
    assert seen["own_session"], "its own session, as an exec'd service has"
    assert seen["parent"], "forked by the supervisor itself"
    assert seen["kill_code"] == -9
    assert "not a pykubelet service" in seen["not_a_service"]


SIGNALS = """
async def main():
    forker, stopped = Forker(), asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    codes = []
    for _ in range(20):
        # A child that would run a while; SIGTERMed the moment it exists, while it may still
        # hold the supervisor's handlers and wake-up fd.
        proc = await forker.spawn("probe", ["--root-dir", sys.argv[1], "--nats-url", "nats://127.0.0.1:1"],
                                  Path(sys.argv[1]) / "probe.log", {})
        proc.send_signal(signal.SIGTERM)
        codes.append(await asyncio.wait_for(proc.wait(), 30))
    await asyncio.sleep(0.2)
    print(json.dumps({"supervisor_saw_sigterm": stopped.is_set(), "codes": codes}))

asyncio.run(main())
"""


def test_a_signal_for_a_new_service_never_reaches_the_supervisor(tmp_path):
    """The child starts with the supervisor's signal handlers and wake-up fd: signals stay blocked
    until it has dropped them, or a SIGTERM for the service would stop the whole node."""
    seen = supervise(SIGNALS, str(tmp_path))
    assert seen["supervisor_saw_sigterm"] is False
    assert all(code in (-15, 0, 1) for code in seen["codes"]), seen["codes"]


REFUSED = """
async def main():
    forker, seen = Forker(), {}
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="bystander")
    t.start()
    try:
        await forker.spawn("probe", ["--help"], Path(sys.argv[1]) / "probe.log", {})
    except ForkRefused as exc:
        seen["refused"] = str(exc)
    release.set()
    t.join()
    # join() returns as the thread finishes; its kernel task goes a moment later.
    deadline = time.monotonic() + 10
    while threads_running() != 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    proc = await forker.spawn("probe", ["--help"], Path(sys.argv[1]) / "probe.log", {})
    seen["after"] = await asyncio.wait_for(proc.wait(), 60)
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_no_fork_while_another_thread_runs(tmp_path):
    seen = supervise(REFUSED, str(tmp_path))
    assert "other thread" in seen["refused"]
    assert seen["after"] == 0, "forks again once the thread is gone"


CHECKS = """
from services.supervisor.node import runtime_answers

async def main():
    forker = Forker()
    seen = {"yes": await forker.check_in_child(lambda: True, 10),
            "no": await forker.check_in_child(lambda: False, 10),
            "raises": await forker.check_in_child(lambda: 1 / 0, 10)}
    started = time.monotonic()
    seen["slow"] = await forker.check_in_child(lambda: time.sleep(30) or True, 0.5)
    seen["slow_seconds"] = time.monotonic() - started
    seen["runtime"] = await forker.check_in_child(lambda: asyncio.run(runtime_answers(sys.argv[1] + "/none.sock")), 20)
    seen["threads"] = threads_running()
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_checks_run_in_a_child_and_leave_no_grpc_behind(tmp_path):
    """The supervisor asks the runtime from a forked child: gRPC's threads would make every
    later fork unsafe."""
    seen = supervise(CHECKS, str(tmp_path))
    assert (seen["yes"], seen["no"], seen["raises"], seen["slow"]) == (True, False, False, False)
    assert seen["slow_seconds"] < 10, "a check that overruns is killed at its timeout"
    assert seen["runtime"] is False, "no runtime at that socket"
    assert seen["threads"] == 1


def _requirement_names(requirements: list[str]) -> set[str]:
    names = set()
    for req in requirements:
        if ";" in req and "extra ==" in req.split(";", 1)[1]:
            continue  # only for an extra: not installed with the package
        names.add(re.split(r"[\s=<>!~\[;(]", req, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def test_the_preload_needs_only_what_a_node_installs():
    """Every module the preload imports comes with pykubelet's runtime dependencies (or theirs),
    not with a test or bench extra: otherwise a node installed without those would start every
    service with an interpreter of its own."""
    declared = _requirement_names(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    installed, todo = set(), list(declared)
    while todo:  # the runtime dependencies and everything they require
        name = todo.pop()
        if name in installed:
            continue
        installed.add(name)
        try:
            todo += _requirement_names(importlib.metadata.requires(name) or [])
        except importlib.metadata.PackageNotFoundError:
            pass
    owners = importlib.metadata.packages_distributions()
    for module in [*forking.RUNTIME_MODULES, *forking.CLUSTER_MODULES]:
        top = module.split(".")[0]
        if top in ("services", "shared") or top in sys.stdlib_module_names:
            continue
        dists = {d.lower().replace("_", "-") for d in owners.get(top, [])}
        assert dists & installed, f"{module} ({', '.join(dists) or 'not installed'}) is not a runtime dependency"


def test_preload_imports_everything_and_starts_no_thread():
    """And on an interpreter that allows it, what it imported is immortal (immortal.py): a
    service's code, the store's models."""
    script = ("import sys; from services.supervisor.forking import preload; preload(True); "
              "import services.probe.manager as m, shared.store.models as s; "
              "print(min(sys.getrefcount(o) for o in (m.ProbeManager.reconcile, s.DesiredPod, m.__dict__)))")
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    refcount = int(out.stdout.strip().splitlines()[-1])
    assert (refcount >= 0xFFFFFFFF) == immortal.supported(), refcount


SERVICE_START = """
import asyncio, sys
from pathlib import Path
from shared.process import tuning as process_tuning
process_tuning.apply()
from services.supervisor import forking
store_path = Path(sys.argv[1]) / "state.db"
forking.preload(False, store_path)
before = set(sys.modules)
preloaded_fastapi = "fastapi" in sys.modules

# What every service does as it starts (shared/process/service.py), short of connecting to the bus.
import uvicorn
from shared.process.admin import AdminApp
from shared.process.admin_token import ensure_token
from shared.config.settings import ConfigError
from shared.store.service_state import ServiceStateWriter
from shared.store import NetworkStatus, Store

store = Store(store_path, writer="network")
store.create_schema()
state = ServiceStateWriter(store, "network")
state.started()
state.synced()
with store.session() as s:
    s.get(NetworkStatus, 1)
app = AdminApp("network", {}, token=ensure_token(Path(sys.argv[1])), freshness=lambda: [])
app.add_views(lambda: None)  # a factory; nothing of FastAPI runs until a view is asked for
uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off").load()
new = sorted(m for m in set(sys.modules) - before if sys.modules[m] is not None)
print("fastapi preloaded" if preloaded_fastapi else (" ".join(new) or "none"))
"""


def test_what_every_service_runs_at_start_is_preloaded(tmp_path):
    """A module a forked service imports only once it runs is a private copy in each of the seven
    (FastAPI's pydantic v1 check on an annotated route was 23 modules, ~1.5 MiB a service). FastAPI
    itself is neither: only a service whose admin views are opened imports it."""
    out = subprocess.run([sys.executable, "-c", SERVICE_START, str(tmp_path)], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "none", f"imported after the preload: {out.stdout.strip()}"


METRICS_FORKED = """
import json, os, sys
from prometheus_client import REGISTRY
from services.supervisor import forking, metric_owners
from shared.process.admin import SERVICES
forking.preload(False)
out = {}
for service in SERVICES:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        metric_owners.keep_only(service)
        os.write(w, json.dumps(sorted(m.name for m in REGISTRY.collect())).encode())
        os._exit(0)
    os.close(w)
    out[service] = json.loads(os.read(r, 1 << 20))
    os.waitpid(pid, 0)
print(json.dumps(out))
"""
METRICS_EXECD = """
import importlib, json, sys
from prometheus_client import REGISTRY
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m.name for m in REGISTRY.collect())))
"""


SHARED_SUMMED = {"kubelet_runtime_operations", "kubelet_runtime_operations_duration_seconds",
                 "kubelet_runtime_operations_errors", "pykubelet_bus_delivery_seconds",
                 "pykubelet_bus_handler_seconds", "pykubelet_store_write_seconds",
                 "rest_client_rate_limiter_duration_seconds"}


def test_a_forked_service_exports_the_metrics_it_would_export_started_on_its_own():
    """The preload registers every service's metrics; each forked service keeps only its own (and
    the shared ones), as when started by itself, so the kubelet API's merged /metrics shows
    kubelet_running_pods once, from pod-sync, not once per service."""
    forked = json.loads(subprocess.run([sys.executable, "-c", METRICS_FORKED], cwd=REPO, capture_output=True,
                                       text=True, timeout=120, check=True).stdout)
    procs = {s: subprocess.Popen([sys.executable, "-c", METRICS_EXECD, m], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for s, m in forking.SERVICE_MAIN.items()}
    execd = {s: json.loads(p.communicate(timeout=120)[0]) for s, p in procs.items()}
    for service in forking.SERVICE_MAIN:
        assert set(execd[service]) <= set(forked[service]), service
        # All it may have besides: the shared code's counters and histograms (CRI calls, bus,
        # store), all zero in a service that does not use them, and summed by the merge.
        assert set(forked[service]) - set(execd[service]) <= SHARED_SUMMED, service
    assert "kubelet_running_pods" in forked["pod-sync"] and "kubelet_running_pods" not in forked["eviction"]
    assert "pykubelet_eviction_signal_available" in forked["eviction"]
    assert "prober_probe" not in forked["pod-sync"]


FALLBACK = """
from services.supervisor.process import ManagedProcess

async def main():
    tmp = Path(sys.argv[1])
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="bystander")
    t.start()
    args = ["--root-dir", str(tmp), "--nats-url", "nats://127.0.0.1:1"]
    p = ManagedProcess(name="probe", argv=[sys.executable, "-m", "services.cli.main", "probe", *args],
                       log_file=tmp / "probe.log", pid_file=tmp / "probe.pid", forker=Forker(), service_args=args)
    await p.start()
    await asyncio.sleep(2.0)
    seen = {"cmdline": Path(f"/proc/{p.pid}/cmdline").read_bytes().replace(bytes(1), b" ").decode(),
            "comm": Path(f"/proc/{p.pid}/comm").read_text().strip(),
            "execd": isinstance(p.proc, asyncio.subprocess.Process),
            "maps_aiohttp": "/aiohttp/" in Path(f"/proc/{p.pid}/maps").read_text()}
    await p.stop()
    release.set()
    t.join()
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_a_service_that_cannot_be_forked_is_execd_through_the_cli(tmp_path):
    """Forking refused (a thread runs): the service starts with an interpreter of its own, through
    the CLI and so with pykubelet's process settings (aiohttp, which nats-py would import, refused)."""
    seen = supervise(FALLBACK, str(tmp_path))
    assert seen["execd"] is True
    # The CLI gives it the title a forked service has.
    assert seen["cmdline"].startswith("pykubelet probe --root-dir"), seen["cmdline"]
    assert seen["comm"] == "pykubelet"
    assert seen["maps_aiohttp"] is False
