"""The fork server and the supervisor's client of it, in a fresh interpreter of their own
(forking the test process would copy its threads): services forked with their arguments, log,
environment and title; exits and signals; hostile requests refused without harm."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from services.supervisor import forkserver
from services.supervisor.forked import CODE_UNKNOWN, ForkServer
from tests.integration.conftest import REPO

SERVE = "import socket, sys; from services.supervisor.forkserver import serve; serve(socket.socket(fileno=int(sys.argv[1])))"


@pytest.fixture
def server():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(theirs.fileno())], pass_fds=[theirs.fileno()], cwd=REPO)
    theirs.close()
    try:
        yield proc, ours
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        ours.close()


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


async def test_a_service_is_forked_with_its_arguments_log_and_environment(server, tmp_path):
    proc, sock = server
    forks = ForkServer(proc.pid, sock)
    await forks.open()
    log = tmp_path / "eviction.log"
    child = await forks.spawn("eviction", ["--root-dir", str(tmp_path), "--help"], log, {"PYKUBELET_TEST": "1"})
    assert await asyncio.wait_for(child.wait(), 30) == 0
    assert "usage: pykubelet eviction" in log.read_text()

    # A service that keeps running: its title says what it is; a signal through the server ends it.
    child = await forks.spawn("eviction", ["--root-dir", str(tmp_path), "--nats-url", "nats://127.0.0.1:1"],
                              log, {})
    await asyncio.sleep(1.0)
    assert cmdline(child.pid).startswith(f"pykubelet eviction --root-dir {tmp_path} ")
    assert os.getsid(child.pid) == child.pid, "its own session, as an exec'd service has"
    child.kill()
    assert await asyncio.wait_for(child.wait(), 10) == -signal.SIGKILL
    await forks.close()
    assert proc.wait(timeout=10) == 0, "the server exits once the supervisor's end is closed"


async def test_services_outlive_a_lost_server_and_are_still_watched(server, tmp_path):
    proc, sock = server
    forks = ForkServer(proc.pid, sock)
    await forks.open()
    child = await forks.spawn("probe", ["--root-dir", str(tmp_path), "--nats-url", "nats://127.0.0.1:1"],
                              tmp_path / "probe.log", {})
    proc.kill()
    for _ in range(100):
        if not forks.alive:
            break
        await asyncio.sleep(0.05)
    assert not forks.alive
    assert child.returncode is None, "the service runs on without the server"
    with pytest.raises(ConnectionError):
        await forks.spawn("probe", [], tmp_path / "probe.log", {})
    child.kill()  # signalled directly now; its exit is seen through a pidfd
    assert await asyncio.wait_for(child.wait(), 10) == CODE_UNKNOWN
    await forks.close()


def ask(sock: socket.socket, msg: bytes) -> dict:
    sock.sendall(msg + b"\n")
    return json.loads(sock.makefile().readline())


def test_hostile_requests_are_refused_and_the_server_keeps_serving(server, tmp_path):
    proc, sock = server
    assert "error" in ask(sock, b"not json")
    assert "not a pykubelet service" in ask(sock, json.dumps(
        {"op": "spawn", "name": "../../bin/sh", "args": [], "log": str(tmp_path / "x"), "env": {}}).encode())["error"]
    assert "strings" in ask(sock, json.dumps(
        {"op": "spawn", "name": "probe", "args": [1], "log": str(tmp_path / "x"), "env": {}}).encode())["error"]
    assert "error" in ask(sock, json.dumps(
        {"op": "spawn", "name": "probe", "args": [], "log": "/nonexistent/dir/log", "env": {}}).encode())
    # A pid that is not one of its children is never signalled (here: a process of ours).
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        sock.sendall(json.dumps({"op": "signal", "pid": bystander.pid, "signal": 9}).encode() + b"\n")
        sock.sendall(json.dumps({"op": "signal", "pid": "1; rm -rf /", "signal": 9}).encode() + b"\n")
        assert "error" in json.loads(sock.makefile().readline())
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
    log = tmp_path / "ok.log"
    assert "pid" in ask(sock, json.dumps({"op": "spawn", "name": "probe", "args": ["--help"], "log": str(log),
                                          "env": {}}).encode()), "still serving after all that"
    # A message that never ends is not the supervisor talking: the server leaves.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it may leave mid-message
        sock.sendall(b"x" * (2 << 20))
    assert proc.wait(timeout=10) == 2


def _requirement_names(requirements: list[str]) -> set[str]:
    names = set()
    for req in requirements:
        if ";" in req and "extra ==" in req.split(";", 1)[1]:
            continue  # only for an extra: not installed with the package
        names.add(re.split(r"[\s=<>!~\[;(]", req, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def test_the_preload_needs_only_what_a_node_installs():
    """Every module the fork server imports comes with pykubelet's runtime dependencies (or
    theirs), not with a test or bench extra: otherwise a node installed without those would run
    without the fork server."""
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
    for module in [*forkserver.RUNTIME_MODULES, *forkserver.CLUSTER_MODULES]:
        top = module.split(".")[0]
        if top in ("services", "shared") or top in sys.stdlib_module_names:
            continue
        dists = {d.lower().replace("_", "-") for d in owners.get(top, [])}
        assert dists & installed, f"{module} ({', '.join(dists) or 'not installed'}) is not a runtime dependency"


def test_preload_imports_everything_and_starts_no_thread():
    out = subprocess.run([sys.executable, "-c", "from services.supervisor.forkserver import preload; "
                          "preload(True); print('ok')"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


SERVICE_START = """
import asyncio, sys
from pathlib import Path
from shared import process_tuning
process_tuning.apply()
from services.supervisor import forkserver
store_path = Path(sys.argv[1]) / "state.db"
forkserver.preload(False, store_path)
before = set(sys.modules)
preloaded_fastapi = "fastapi" in sys.modules

# What every service does as it starts (shared/service.py), short of connecting to the bus.
import uvicorn
from shared.admin import AdminApp
from shared.config import ConfigError
from shared.service_state import ServiceStateWriter
from shared.store import NetworkStatus, Store

store = Store(store_path, writer="network")
store.create_schema()
state = ServiceStateWriter(store, "network")
state.started()
state.synced()
with store.session() as s:
    s.get(NetworkStatus, 1)
app = AdminApp("network", {}, freshness=lambda: [])
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
from services.supervisor import forkserver, metric_owners
from shared.admin import SERVICES
forkserver.preload(False)
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
                 "pykubelet_bus_handler_seconds", "pykubelet_store_write_seconds"}


def test_a_forked_service_exports_the_metrics_it_would_export_started_on_its_own():
    """The preload registers every service's metrics; each forked service keeps only its own (and
    the shared ones), as when started by itself, so the kubelet API's merged /metrics shows
    kubelet_running_pods once, from pod-sync, not once per service."""
    forked = json.loads(subprocess.run([sys.executable, "-c", METRICS_FORKED], cwd=REPO, capture_output=True,
                                       text=True, timeout=120, check=True).stdout)
    procs = {s: subprocess.Popen([sys.executable, "-c", METRICS_EXECD, m], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for s, m in forkserver.SERVICE_MAIN.items()}
    execd = {s: json.loads(p.communicate(timeout=120)[0]) for s, p in procs.items()}
    for service in forkserver.SERVICE_MAIN:
        assert set(execd[service]) <= set(forked[service]), service
        # All it may have besides: the shared code's counters and histograms (CRI calls, bus,
        # store), all zero in a service that does not use them, and summed by the merge.
        assert set(forked[service]) - set(execd[service]) <= SHARED_SUMMED, service
    assert "kubelet_running_pods" in forked["pod-sync"] and "kubelet_running_pods" not in forked["eviction"]
    assert "pykubelet_eviction_signal_available" in forked["eviction"]
    assert "prober_probe" not in forked["pod-sync"]
