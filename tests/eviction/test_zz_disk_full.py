"""Runs last in the package: the node's root filesystem filled to the last block. Store writes
fail; every service says so on /readyz and keeps running (no restart); when space returns,
writes work again, status is current again and a new pod starts."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import httpx

from shared.process.admin import SERVICES
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


def test_a_full_root_filesystem_is_waited_out(pressure_cluster, small_fs):
    c = pressure_cluster
    node = c.node
    pids = {s: node.service_pid(s) for s in SERVICES}
    filler = fill(small_fs)
    try:
        wait_for(lambda: all("database or disk is full" in store_problem(node, s) for s in SERVICES), 60,
                 "every service to report that it cannot write the store")
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
