"""The supervisor's side of the fork server (services/supervisor/forkserver.py): ask it for a
service process, signal it, hear it exit. A forked service looks to ManagedProcess like the
asyncio subprocess an exec would give (pid, returncode, wait, send_signal, kill)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import time
from pathlib import Path

from services.supervisor import forkserver

log = logging.getLogger(__name__)

SPAWN_TIMEOUT = 10.0
# A service whose server is gone is watched through a pidfd; its exit code is lost with the server.
CODE_UNKNOWN = 255


class ForkedProcess:
    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.returncode: int | None = None
        self._exited = asyncio.Event()

    def _set_exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            self._server.signal(self, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """Started before the event loop (fork needs a process without one), opened inside it."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self._sock = sock
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._replies: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self._procs: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}  # exits that beat their spawn reply
        self.alive = False
        self._closing = False

    @classmethod
    def start(cls, cluster_mode: bool, root_dir: Path, store_path: Path | None = None) -> ForkServer:
        t = time.monotonic()
        pid, sock = forkserver.start(cluster_mode, f"pykubelet fork-server --root-dir {root_dir}", store_path)
        log.info("fork server       running (pid %d, services preloaded in %.1fs)", pid, time.monotonic() - t)
        return cls(pid, sock)

    async def open(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(sock=self._sock, limit=forkserver.MAX_MESSAGE)
        self.alive = True
        self._reader_task = asyncio.create_task(self._read(reader), name="fork-server:read")

    async def spawn(self, name: str, args: list[str], log_file: Path, env: dict[str, str]) -> ForkedProcess:
        if not self.alive or self._writer is None:
            raise ConnectionError("the fork server is not running")
        async with self._lock:  # one request in flight: replies come in order
            self._write({"op": "spawn", "name": name, "args": args, "log": str(log_file), "env": env})
            reply = await asyncio.wait_for(self._replies.get(), SPAWN_TIMEOUT)
        if "error" in reply:
            raise OSError(f"fork server could not start {name}: {reply['error']}")
        pid = reply["pid"]
        assert isinstance(pid, int)
        proc = ForkedProcess(self, pid)
        if pid in self._early_exits:
            proc._set_exited(self._early_exits.pop(pid))
        else:
            self._procs[pid] = proc
        return proc

    def signal(self, proc: ForkedProcess, sig: int) -> None:
        if self.alive:
            self._write({"op": "signal", "pid": proc.pid, "signal": int(sig)})
        else:  # orphaned: the kernel keeps the pid while its pidfd watch has not fired
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass

    def _write(self, msg: dict[str, object]) -> None:
        assert self._writer is not None
        self._writer.write(json.dumps(msg).encode() + b"\n")

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                msg = json.loads(line)
                if "exited" in msg:
                    pid, code = int(msg["exited"]), int(msg["code"])
                    proc = self._procs.pop(pid, None)
                    if proc is None:
                        self._early_exits[pid] = code
                    else:
                        proc._set_exited(code)
                else:
                    self._replies.put_nowait(msg)
        except (OSError, ValueError) as exc:
            log.error("fork server connection failed: %s", exc)
        self.alive = False
        self._replies.put_nowait({"error": "the fork server is gone"})  # a spawn waiting for its reply
        self._reap_server()
        if self._closing:
            return
        running = list(self._procs.values())
        log.error("the fork server (pid %d) is gone; services restart as separate processes from now on%s",
                  self.pid, f" ({len(running)} running ones are watched by pid)" if running else "")
        for proc in running:
            self._watch_orphan(proc)

    def _watch_orphan(self, proc: ForkedProcess) -> None:
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(proc.pid)
        except ProcessLookupError:
            self._procs.pop(proc.pid, None)
            proc._set_exited(CODE_UNKNOWN)
            return

        def gone() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            self._procs.pop(proc.pid, None)
            proc._set_exited(CODE_UNKNOWN)

        loop.add_reader(fd, gone)

    def _reap_server(self) -> bool:
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return True
        return pid != 0

    async def close(self, timeout: float = 5.0) -> None:
        """Close our end: the server exits (the services it forked are not touched)."""
        self._closing = True
        if self._writer is not None:
            self._writer.close()
        else:
            self._sock.close()
        if self._reader_task is not None:
            try:
                await asyncio.wait_for(self._reader_task, timeout)
            except asyncio.TimeoutError:
                self._reader_task.cancel()
        deadline = time.monotonic() + timeout
        while not self._reap_server():
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return
            await asyncio.sleep(0.05)
