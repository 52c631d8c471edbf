"""Runs last in the package: the node's root filesystem filled to the last block. Store writes
fail; a service whose write fails says so on /readyz and keeps running (no restart); when space
returns, writes work again, status is current again and a new pod starts.

SQLite in WAL mode overwrites its write-ahead log from the start once every reader has moved past
a checkpoint, so a small write can still land in blocks the log already holds while the disk is
full. A service whose heartbeat lands that way truthfully says "writable"; what must never happen
is "writable" while its heartbeats stop landing."""

from __future__ import annotations

import errno
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from shared.process.admin import SERVICES
from shared.store.service_state import read_states
from tests.integration.conftest import wait_for

CHUNK = 64 * 1024


def fill(fs: Path) -> Path:
    """A file taking every free block (root may use the reserved ones too)."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        st = os.statvfs(fs)
        size = st.f_bfree * st.f_frsize
        while size > 0:  # most of it at once (the extents need a few blocks of their own)
            size -= 64 * 2**20
            try:
                os.posix_fallocate(fd, 0, size)
                break
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        os.lseek(fd, 0, os.SEEK_END)
        while True:
            try:
                os.write(fd, b"\0" * CHUNK)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return filler


def store_problem(node, service: str) -> str:
    try:
        body = node.admin_get(service, "/readyz", timeout=5).json()
    except (httpx.HTTPError, ValueError) as exc:
        return f"no answer: {exc}"
    return body["checks"].get("store", {}).get("message", "")


def truthful_store_checks(cluster, since: datetime, seen: dict[str, str]) -> bool:
    """Every service either says it cannot write the store, or its heartbeat written after `since`
    is in the store (so "writable" is true). `seen` keeps what each said, for the failure message."""
    beats = read_states(cluster.store())
    for s in SERVICES:
        problem = store_problem(cluster.node, s)
        beat = beats[s].heartbeat_at if s in beats else None
        if "database or disk is full" in problem:
            seen[s] = "cannot write: database or disk is full"
        elif problem == "writable" and beat is not None and beat > since:
            seen[s] = f"writable, heartbeat landed at {beat:%H:%M:%S}"
        else:
            seen[s] = f"{problem!r}, last heartbeat {beat}"
    return all(v.startswith(("cannot write", "writable, heartbeat")) for v in seen.values())


def test_a_full_root_filesystem_is_waited_out(pressure_cluster, small_fs):
    c = pressure_cluster
    node = c.node
    pids = {s: node.service_pid(s) for s in SERVICES}
    filler = fill(small_fs)
    full_since = datetime.now(UTC)
    seen: dict[str, str] = {}
    try:
        try:
            # Every service says so within a few heartbeats; at least one write does fail.
            wait_for(lambda: truthful_store_checks(c, full_since, seen)
                     and any(v.startswith("cannot write") for v in seen.values()), 60,
                     "each service to report that it cannot write the store or to go on writing")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; what each service said: {seen}") from None
        print(f"\nwith the disk full: {seen}")
        time.sleep(15)  # a while with the disk full: nothing gives up
        assert {s: node.service_pid(s) for s in SERVICES} == pids, "no service restarted"
    finally:
        filler.unlink()
    started = time.monotonic()
    wait_for(lambda: all(store_problem(node, s) == "writable" for s in SERVICES), 60,
             "store writes to work again")
    wait_for(lambda: node.cli("status", check=False).returncode == 0, 60, "status current again")
    recovered = time.monotonic() - started
    assert {s: node.service_pid(s) for s in SERVICES} == pids, "no service restarted"
    c.create_pod("after-full", {"containers": [{"name": "app", "image": node.image("busybox"),
                                                "command": ["sleep", "3600"]}]})
    c.wait_pod("after-full", lambda p: p.get("status", {}).get("phase") == "Running", 90, "a new pod Running")
    print(f"\nroot filesystem full: writes and status back {recovered:.1f}s after space returned")
    c.delete_pods("after-full")
