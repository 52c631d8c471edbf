"""What a node left running when its supervisor died (SIGKILL, OOM kill, a crash).

The supervisor starts every process in its own session, so they outlive it: pods keep running,
and so do NATS, the registry, containerd and the services. Their pid files in run/ say what
they are; a pid is only trusted while the process's command line still names the node's root
dir (a recycled pid belongs to someone else and is never signalled).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from shared.process.admin import SERVICES

log = logging.getLogger(__name__)

SUPERVISOR_PID = "supervisor.pid"
NODE_FILE = "node.json"  # what `down` needs to know about a node whose supervisor is gone
# Stopped in this order: the services first (nothing acts on pods any more), containerd last
# (its containers survive it; `down` removes them before).
STOP_ORDER = [*reversed(SERVICES), "registry", "nats", "containerd"]


@dataclass(frozen=True)
class Leftover:
    name: str
    pid: int


def pid_alive(pid: int) -> bool:
    """True while the process exists and has not exited (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def started_for(pid: int, root: Path) -> bool:
    """Whether the process's arguments name the root dir (or a path under it). A forked service
    has its arguments in its title, separated by spaces."""
    try:
        argv = re.split("[\0 ]", Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
    except OSError:
        return False
    prefix = str(root).rstrip("/")
    return any(a == prefix or a.startswith(prefix + "/") for a in argv)


def orphaned_shims(root: Path) -> list[int]:
    """containerd shims of this node's containerd, running without it: their containers too."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and started_for(int(entry.name), root):
            try:
                exe = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
            except OSError:
                continue
            if exe.rsplit(b"/", 1)[-1].startswith(b"containerd-shim"):
                found.append(int(entry.name))
    return found


def find_leftovers(root: Path) -> list[Leftover]:
    """The node's processes still running, in the order they should be stopped."""
    found = []
    for name in STOP_ORDER:
        try:
            pid = int((root / "run" / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            continue
        if pid > 1 and pid_alive(pid) and started_for(pid, root):
            found.append(Leftover(name, pid))
    return found


async def stop_pid(name: str, pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after the timeout; returns once the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            log.warning("%s (pid %d) did not stop within %.0fs; killing it", name, pid, timeout)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + 10
        await asyncio.sleep(0.1)


async def stop_leftovers(root: Path, leftovers: list[Leftover], timeout: float = 30.0) -> None:
    for item in leftovers:
        log.info("stopping %s (pid %d)", item.name, item.pid)
        await stop_pid(item.name, item.pid, timeout)
        (root / "run" / f"{item.name}.pid").unlink(missing_ok=True)


def write_node_file(run_dir: Path, **facts: object) -> None:
    (run_dir / NODE_FILE).write_text(json.dumps(facts) + "\n")


def read_node_file(run_dir: Path) -> dict[str, object]:
    try:
        facts = json.loads((run_dir / NODE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


async def stop_abandoned_node(root: Path, leftovers: list[Leftover], timeout: float) -> None:
    """`pykubelet down` for a node whose supervisor is gone: what the supervisor's own stop
    does, from the pid files (services, then the pods unless the node keeps them, then the rest)."""
    # Imported here: `pykubelet up` needs none of this to start.
    from services.supervisor.containerd_config import ContainerdLayout
    from services.supervisor.teardown import teardown_node
    from shared.config.settings import KubeletConfiguration

    facts = read_node_file(root / "run")
    services = [item for item in leftovers if item.name in SERVICES]
    infra = [item for item in leftovers if item.name not in SERVICES]
    await stop_leftovers(root, services, timeout)
    logs_dir = facts.get("pod_logs_dir")
    if not isinstance(logs_dir, str) or not logs_dir.startswith("/"):
        logs_dir = KubeletConfiguration().pod_logs_dir
    if facts.get("keep_pods") is not True and any(item.name == "containerd" for item in infra):
        await teardown_node(root, ContainerdLayout(root / "containerd").endpoint, logs_dir)
    await stop_leftovers(root, infra, timeout)
    for name in (SUPERVISOR_PID, "ready"):
        (root / "run" / name).unlink(missing_ok=True)
