"""A child process the supervisor keeps running: started, watched, restarted with back-off."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from services.supervisor.forking import ForkedProcess, Forker, ForkRefused
from shared.host.node_dirs import open_private_log
from shared.tasks.retry import describe, keep_running, until_done

log = logging.getLogger(__name__)


class ProcessExited(RuntimeError):
    pass


class NotReady(RuntimeError):
    pass

RESTART_INITIAL, RESTART_CAP = 1.0, 30.0
# A process that ran this long is considered healthy again: its back-off starts over.
STABLE_AFTER = 60.0


@dataclass
class ManagedProcess:
    name: str
    argv: list[str]
    log_file: Path
    pid_file: Path
    env: dict[str, str] | None = None
    ready: Callable[[], Awaitable[bool]] | None = None  # polled after start until True
    umask: int | None = None  # the process's own instead of the supervisor's (077)
    stop_timeout: float = 20.0
    # A pykubelet service: forked from the supervisor (args: the service's flags), or started
    # with argv when there is no forker or forking is refused.
    forker: Forker | None = None
    service_args: list[str] | None = None
    proc: asyncio.subprocess.Process | ForkedProcess | None = None
    restarts: int = 0
    _stopping: bool = False
    _started_at: float = 0.0
    _watch: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.returncode is None else None

    async def _spawn(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.proc = None
        if self.forker is not None and self.service_args is not None:
            try:
                self.proc = await self.forker.spawn(self.name, self.service_args, self.log_file, self.env or {})
            except ForkRefused as exc:
                log.warning("%s: not forked (%s); starting it with an interpreter of its own", self.name, exc)
        if self.proc is None:
            await self._exec()
        self._started_at = time.monotonic()
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        assert self.proc is not None  # _exec started it
        self.pid_file.write_text(f"{self.proc.pid}\n")

    async def _exec(self) -> None:
        out = open_private_log(self.log_file)
        try:
            # Own session: a Ctrl-C in the terminal reaches only the supervisor, which then stops
            # everything in order.
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdout=out, stderr=out, stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, **(self.env or {})},
                umask=-1 if self.umask is None else self.umask)
        finally:
            os.close(out)

    async def start(self, ready_timeout: float = 60.0) -> None:
        await self._spawn()
        if self.ready is not None:
            await self.wait_ready(ready_timeout)
        self._watch = asyncio.create_task(self._keep_running(), name=f"supervise:{self.name}")

    async def wait_ready(self, timeout: float) -> None:
        assert self.proc is not None and self.ready is not None
        proc, ready = self.proc, self.ready

        async def check() -> None:
            if proc.returncode is not None:
                raise ProcessExited(f"{self.name} exited with code {proc.returncode} while starting; "
                                    f"see {self.log_file}")
            try:
                ok = await ready()
            except ProcessExited:  # the check knows it will never be ready
                raise
            except Exception as exc:  # not listening yet, and the like
                raise NotReady(describe(exc)) from exc
            if not ok:
                raise NotReady("not ready yet")

        try:
            # Polled quickly (starting takes a second or two), logged only at debug level; an
            # exit while starting is raised at once.
            await until_done(f"waiting for {self.name}", check, log, initial=0.1, cap=0.5, timeout=timeout,
                             retry_on=(NotReady,), level=logging.DEBUG)
        except NotReady as exc:
            raise TimeoutError(f"{self.name} not ready after {timeout:.0f}s ({describe(exc)}); "
                               f"see {self.log_file}") from None

    async def _keep_running(self) -> None:
        """Started; from now on restarted whenever it exits, with a back-off that starts over
        once it has run STABLE_AFTER."""
        first = True

        async def run_once() -> None:
            nonlocal first
            if not first:
                self.restarts += 1
                await self._spawn()
            first = False
            assert self.proc is not None
            code = await self.proc.wait()
            if self._stopping:  # stop() cancels this task next
                await asyncio.Event().wait()
            raise ProcessExited(f"exited with code {code} after {time.monotonic() - self._started_at:.0f}s "
                                f"(log: {self.log_file})")

        await keep_running(f"process {self.name}", run_once, log, initial=RESTART_INITIAL, cap=RESTART_CAP,
                           healthy_after=STABLE_AFTER)

    async def stop(self) -> None:
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
        if self.proc is None or self.proc.returncode is not None:
            self.pid_file.unlink(missing_ok=True)
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), self.stop_timeout)
        except asyncio.TimeoutError:
            log.warning("%s did not stop within %.0fs; killing it", self.name, self.stop_timeout)
            self.proc.kill()
            await self.proc.wait()
        self.pid_file.unlink(missing_ok=True)
