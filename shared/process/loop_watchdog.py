"""Finds the callbacks that block a service's event loop: a sampling watchdog thread, for tests.

A callback that blocks in a file, process or lock call holds up everything else the service does
(its healthz, every other pod's sync) for as long as the call takes. The integration and
security suites run every service with PYKUBELET_LOOP_WATCHDOG=<file> set; each service then
records, as one JSON line in that file, every callback that kept its loop for over 100 ms while
blocked in a system call for most of that time, with the stack where it blocked. Unset (as in
production), nothing is started.

Why a sampler and not asyncio's debug mode (loop.set_debug + slow_callback_duration): debug mode
measures each callback's wall time, so on a loaded 2-core machine a callback the scheduler
preempted looks as slow as one that blocked; a test on it is flaky, or lax enough to miss real
blocking. It also slows every callback (a traceback kept for each handle and coroutine). What
it cannot say is *why* a callback was slow, and that is what tells a blocking call from load.

The watchdog thread samples the loop thread every ~10 ms: its Python stack
(sys._current_frames()) and its state in the kernel (/proc/self/task/<tid>/syscall: "running"
when it runs or waits for a CPU, else the number and arguments of the system call it sleeps
in; unlike the state letter of .../stat it says which call, and by a futex's address whether it
is the GIL). From the
stack: the loop is in a callback when the frame just below BaseEventLoop._run_once is
Handle._run; the same frame object in two samples is the same invocation (the watchdog holds a
reference, so a later callback cannot get its address). One invocation seen for over THRESHOLD,
sleeping in a system call in more than half of its samples, is a blocking callback. A futex wait
counts as blocked (a lock or Future.result() called from the loop), except on a futex in the
interpreter's own state (_PyRuntime, where the GIL is): that is a loop thread waiting for the GIL
while another thread of the service (gRPC's, an executor's) runs Python, i.e. CPU contention,
not a call that blocks. The watchdog itself releases the GIL to read the kernel state, so it
does not make the loop thread look blocked. A callback that was running (CPU-bound, or runnable
but not scheduled) for most of the time is recorded as "busy" only past BUSY_THRESHOLD: on a
loaded machine CPU time stretches, blocking does not appear from nowhere. The cost, paid only
when the variable is set: one thread per service taking the GIL ~100 times a second (about 2%
of a core per service), and the few samples it misses while a callback holds the GIL in C code.

Each record names the callback (the outermost frame below Handle._run) and the sites its samples
found: the innermost pykubelet frame, the innermost frame (the blocking call as Python sees it)
and the system call (or "running"), with how many samples each had, and the stack of the most
frequent one. A callback still blocked after STUCK_AFTER is written then, marked "ended": false,
since its process may never get to finish it.
"""

from __future__ import annotations

import asyncio.base_events
import asyncio.events
import contextlib
import ctypes
import json
import os
import platform
import sys
import sysconfig
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Iterator

ENV = "PYKUBELET_LOOP_WATCHDOG"
INTERVAL = 0.01
THRESHOLD = 0.1
BUSY_THRESHOLD = 0.5
STUCK_AFTER = 10.0
# A callback is blocking when more than this share of its samples found it in a system call.
BLOCKED_SHARE = 0.5
_MAX_SITES = 5
# A sample's "system call" when the loop thread was running or runnable.
RUNNING = "running"

_RUN_ONCE: CodeType = asyncio.base_events.BaseEventLoop._run_once.__code__  # type: ignore[attr-defined]
_HANDLE_RUN: CodeType = asyncio.events.Handle._run.__code__
_REPO = Path(__file__).resolve().parents[2]
_PYKUBELET_DIRS = tuple(str(_REPO / d) + os.sep for d in ("services", "shared", "tests"))
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
# The system calls a blocked loop is usually found in (x86_64 numbers), to name them in a record.
_SYSCALLS_X86_64 = {
    0: "read", 1: "write", 2: "open", 4: "stat", 5: "fstat", 6: "lstat", 7: "poll", 17: "pread64",
    18: "pwrite64", 19: "readv", 20: "writev", 21: "access", 23: "select", 35: "nanosleep",
    42: "connect", 43: "accept", 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg",
    56: "clone", 57: "fork", 59: "execve", 61: "wait4", 74: "fsync", 75: "fdatasync", 78: "getdents",
    82: "rename", 83: "mkdir", 84: "rmdir", 87: "unlink", 89: "readlink", 165: "mount",
    166: "umount2", 202: "futex", 217: "getdents64", 230: "clock_nanosleep", 232: "epoll_wait",
    247: "waitid", 257: "openat", 262: "newfstatat", 263: "unlinkat", 270: "pselect6", 271: "ppoll",
    281: "epoll_pwait", 285: "fallocate", 316: "renameat2", 332: "statx", 435: "clone3",
}
_FUTEX = 202
# What a sample records for a loop thread waiting for the GIL (counted as running).
GIL = "gil"


def interpreter_memory() -> range | None:
    """The mapping holding the interpreter's runtime state (and in it the GIL), or None where
    it cannot be found (then a futex wait always counts as blocked)."""
    if platform.machine() != "x86_64":
        return None
    try:
        runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    except (ValueError, AttributeError):
        return None
    with open("/proc/self/maps") as maps:
        for line in maps:
            low, high = (int(a, 16) for a in line.split(maxsplit=1)[0].split("-"))
            if low <= runtime < high:
                return range(low, high)
    return None


def kernel_state(syscall_file: bytes, interpreter: range | None) -> str:
    """What a thread's /proc/<pid>/task/<tid>/syscall says it does: RUNNING (running or
    runnable), GIL (waiting for it: a futex in the interpreter's state), else the system call
    it sleeps in."""
    fields = syscall_file.split()
    if not fields or fields[0] == b"running":
        return RUNNING
    number = int(fields[0])
    # The futex's address is the call's first argument (the second field).
    if number == _FUTEX and interpreter is not None and int(fields[1], 16) in interpreter:
        return GIL
    if platform.machine() == "x86_64":
        return _SYSCALLS_X86_64.get(number, f"syscall {number}")
    return f"syscall {number}"


def _where(frame: FrameType) -> str:
    path = frame.f_code.co_filename
    if path.startswith(_PYKUBELET_DIRS):
        path = os.path.relpath(path, _REPO)
    elif "site-packages" + os.sep in path:
        path = path.split("site-packages" + os.sep, 1)[1]
    elif path.startswith(_STDLIB):
        path = path[len(_STDLIB):]
    return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"


def _callback_frames(innermost: FrameType | None) -> list[FrameType] | None:
    """The frames of the callback the loop thread is in, outermost first (the first is
    Handle._run), or None when the loop is not running a callback (in select, between
    callbacks, not started)."""
    frames: list[FrameType] = []
    frame = innermost
    while frame is not None:
        if frame.f_code is _RUN_ONCE:
            if frames and frames[-1].f_code is _HANDLE_RUN:
                frames.reverse()
                return frames
            return None
        frames.append(frame)
        frame = frame.f_back
    return None


@dataclass
class _Episode:
    """One invocation of a callback as the samples saw it."""

    handle_frame: FrameType
    first: float
    last: float
    callback: str
    samples: int = 0
    blocked: int = 0
    sites: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    stacks: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    written: bool = False

    @property
    def seconds(self) -> float:
        return self.last - self.first

    def kind(self) -> str | None:
        if self.samples and self.blocked / self.samples > BLOCKED_SHARE:
            return "blocking" if self.seconds > THRESHOLD else None
        return "busy" if self.seconds > BUSY_THRESHOLD else None


class LoopWatchdog:
    """Samples the stack and kernel state of the thread that makes it, which runs (or will run) an
    asyncio loop (see the module's docstring), and appends a JSON line to `path` for each slow
    callback it finds."""

    def __init__(self, path: Path, service: str, interval: float = INTERVAL) -> None:
        self.path = path
        self.service = service
        self.interval = interval
        self._ident = threading.get_ident()
        # Not threading.current_thread().native_id: after a fork (`pykubelet up` forks the
        # services) it still holds the parent's thread id.
        tid = threading.get_native_id()
        self._kernel_state = os.open(f"/proc/self/task/{tid}/syscall", os.O_RDONLY | os.O_CLOEXEC)
        self._interpreter = interpreter_memory()
        self._stop = threading.Event()
        self._episode: _Episode | None = None
        self._thread = threading.Thread(target=self._run, name="loop-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling and write the callback in progress if it already counts as slow."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self._episode is not None:
            self._finish(self._episode)
            self._episode = None
        os.close(self._kernel_state)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sample()
            except ProcessLookupError:  # the loop thread has exited
                return

    def _syscall(self) -> str:
        # os.pread releases the GIL: a loop thread that waited for it while this thread held it
        # can run again, and is seen running.
        return kernel_state(os.pread(self._kernel_state, 256, 0), self._interpreter)

    def _sample(self) -> None:
        syscall = self._syscall()
        now = time.monotonic()
        frames = _callback_frames(sys._current_frames().get(self._ident))
        episode = self._episode
        if episode is not None and (frames is None or frames[0] is not episode.handle_frame):
            self._finish(episode)
            episode = self._episode = None
        if frames is None:
            return
        if episode is None:
            callback = _where(frames[1]) if len(frames) > 1 else _where(frames[0])
            episode = self._episode = _Episode(frames[0], now, now, callback)
        episode.last = now
        episode.samples += 1
        if syscall not in (RUNNING, GIL):
            episode.blocked += 1
        ours = [f for f in frames if f.f_code.co_filename.startswith(_PYKUBELET_DIRS)]
        site = (_where(ours[-1]) if ours else "", _where(frames[-1]), syscall)
        episode.sites[site] += 1
        if site not in episode.stacks:
            episode.stacks[site] = [_where(f) for f in frames[1:]]
        if not episode.written and episode.seconds > STUCK_AFTER and episode.kind() == "blocking":
            self._write(episode, ended=False)

    def _finish(self, episode: _Episode) -> None:
        if not episode.written and episode.kind() is not None:
            self._write(episode, ended=True)

    def _write(self, episode: _Episode, ended: bool) -> None:
        episode.written = True
        top = episode.sites.most_common(_MAX_SITES)
        record = {
            "service": self.service, "pid": os.getpid(), "kind": episode.kind(),
            "seconds": round(episode.seconds, 3), "samples": episode.samples,
            "blocked_share": round(episode.blocked / episode.samples, 2), "ended": ended,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "callback": episode.callback,
            "sites": [{"site": s[0], "call": s[1], "syscall": s[2], "samples": n} for s, n in top],
            "stack": episode.stacks[top[0][0]] if top else [],
        }
        line = (json.dumps(record) + "\n").encode()
        # One write with O_APPEND: the lines of the services sharing the file do not interleave.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


@contextlib.contextmanager
def watching(service: str) -> Iterator[None]:
    """Watch the event loop this thread is about to run, when PYKUBELET_LOOP_WATCHDOG names the
    file to record slow callbacks in; otherwise do nothing."""
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    watchdog = LoopWatchdog(Path(path), service)
    watchdog.start()
    try:
        yield
    finally:
        watchdog.stop()
