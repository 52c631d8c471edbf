"""The event-loop watchdog (shared/process/loop_watchdog.py) on a real loop: what it reports as blocking
and what it leaves alone."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from shared.process import loop_watchdog
from shared.process.loop_watchdog import LoopWatchdog, watching

BLOCK_FOR = 0.4
REPO = Path(__file__).resolve().parents[2]


def run_loop_with(callback: Callable[[], None]) -> None:
    """Run one callback on a fresh loop, then let the loop go back to select for a while."""
    async def main() -> None:
        asyncio.get_running_loop().call_soon(callback)
        await asyncio.sleep(BLOCK_FOR + 0.2)
    asyncio.run(main())


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def read_pipe_nobody_writes() -> None:
    r, w = os.pipe()
    # The only writer comes after BLOCK_FOR, so the read cannot block the test for ever.
    threading.Timer(BLOCK_FOR, os.write, (w, b"x")).start()
    try:
        os.read(r, 1)  # the blocking call
    finally:
        os.close(r)
        os.close(w)


def sleep_on_loop() -> None:
    time.sleep(BLOCK_FOR)


def wait_for_a_thread() -> None:
    threading.Event().wait(BLOCK_FOR)


@pytest.mark.parametrize("callback,syscall", [
    (read_pipe_nobody_writes, "read"),
    (sleep_on_loop, "clock_nanosleep"),
    (wait_for_a_thread, "futex"),
])
def test_a_callback_blocked_in_a_system_call_is_recorded_with_its_stack(tmp_path, monkeypatch, callback, syscall):
    out = tmp_path / "watchdog.jsonl"
    monkeypatch.setenv(loop_watchdog.ENV, str(out))
    with watching("test-service"):
        run_loop_with(callback)
    found = records(out)
    assert len(found) == 1, found
    rec = found[0]
    assert rec["service"] == "test-service" and rec["pid"] == os.getpid()
    assert rec["kind"] == "blocking" and rec["ended"] is True
    assert rec["seconds"] > loop_watchdog.THRESHOLD and rec["blocked_share"] > 0.5
    assert rec["callback"].startswith("tests/unit/test_loop_watchdog.py:") and callback.__name__ in rec["callback"]
    top = rec["sites"][0]
    assert top["syscall"] == syscall
    assert top["site"].startswith("tests/unit/test_loop_watchdog.py:") and callback.__name__ in top["site"]
    assert any(callback.__name__ in line for line in rec["stack"]), rec["stack"]


def test_the_site_is_the_line_of_the_blocking_call(tmp_path):
    out = tmp_path / "watchdog.jsonl"
    watchdog = LoopWatchdog(out, "test-service")
    watchdog.start()
    try:
        run_loop_with(read_pipe_nobody_writes)
    finally:
        watchdog.stop()
    (rec,) = records(out)
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# the blocking call" in text)
    assert rec["sites"][0]["site"] == f"tests/unit/test_loop_watchdog.py:{line} in read_pipe_nobody_writes"


def test_a_forked_service_is_watched_in_its_own_thread(tmp_path, monkeypatch):
    """`pykubelet up` forks the services: the watchdog must sample the child's thread."""
    out = tmp_path / "watchdog.jsonl"
    monkeypatch.setenv(loop_watchdog.ENV, str(out))
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with watching("forked-service"):
                run_loop_with(read_pipe_nobody_writes)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    (rec,) = records(out)
    assert rec["pid"] == pid and rec["kind"] == "blocking" and rec["sites"][0]["syscall"] == "read"


def spin(seconds: float) -> Callable[[], None]:
    def busy() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sum(range(1000))
    return busy


def test_a_cpu_busy_callback_is_not_blocking(tmp_path):
    out = tmp_path / "watchdog.jsonl"
    watchdog = LoopWatchdog(out, "test-service")
    watchdog.start()
    try:
        run_loop_with(spin(BLOCK_FOR))  # slower than the blocking threshold, faster than the busy one
        run_loop_with(spin(loop_watchdog.BUSY_THRESHOLD + 0.3))
    finally:
        watchdog.stop()
    found = records(out)
    assert [r["kind"] for r in found] == ["busy"], found
    assert found[0]["seconds"] > loop_watchdog.BUSY_THRESHOLD


# A process whose main thread holds the GIL in one long C call while another thread wants it.
GIL_HOLDER = """
import threading
from shared.process.loop_watchdog import interpreter_memory
def python_code():
    while True:
        pass
t = threading.Thread(target=python_code, daemon=True)
t.start()
mem = interpreter_memory()
print(t.native_id, mem.start, mem.stop, flush=True)
sum(range(10 ** 11))  # C code: keeps the GIL, never checks for a drop request
"""


def test_a_thread_waiting_for_the_gil_is_not_blocked_in_a_call():
    """Another thread of a service running Python (gRPC's, an executor's) makes the loop thread
    wait for the GIL in a futex: contention, not a blocking call, whatever the stack shows."""
    child = subprocess.Popen([sys.executable, "-c", GIL_HOLDER], stdout=subprocess.PIPE, cwd=REPO)
    try:
        tid, start, stop = (int(f) for f in child.stdout.readline().split())
        syscall = Path(f"/proc/{child.pid}/task/{tid}/syscall")
        # The waiting thread wakes every few milliseconds to ask again for the GIL, so it is
        # "running" now and then: the sample judged is the one taken inside the wait.
        deadline = time.monotonic() + 10
        seen = syscall.read_bytes()
        while not seen.startswith(b"202 ") and time.monotonic() < deadline:
            time.sleep(0.01)  # until the thread has asked for the GIL
            seen = syscall.read_bytes()
        assert loop_watchdog.kernel_state(seen, range(start, stop)) == loop_watchdog.GIL, seen
        # Without knowing where the interpreter's state is, the same wait counts as a futex call.
        assert loop_watchdog.kernel_state(seen, None) == "futex"
    finally:
        child.kill()
        child.wait()


def test_a_loop_idle_in_select_is_not_reported(tmp_path):
    out = tmp_path / "watchdog.jsonl"
    watchdog = LoopWatchdog(out, "test-service")
    watchdog.start()
    try:
        asyncio.run(asyncio.sleep(1.0))
    finally:
        watchdog.stop()
    assert records(out) == []


def test_without_the_variable_nothing_is_started(monkeypatch):
    monkeypatch.delenv(loop_watchdog.ENV, raising=False)
    before = threading.active_count()
    with watching("test-service"):
        assert threading.active_count() == before
