"""Container log rotation, as the kubelet's container log manager does it.

When a running container's log grows past containerLogMaxSize, the file is renamed with a
timestamp, the runtime is told to reopen its log (CRI ReopenContainerLog), older rotated files
are gzipped, and at most containerLogMaxFiles files (current included) are kept.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import shutil
import time
from pathlib import Path

from cri_api.v1 import api_pb2 as cri

from shared.host.safe_paths import open_regular
from shared.runtime.cri import CRIError, RuntimeService
from shared.runtime.cri import labels as L

log = logging.getLogger(__name__)



def _rotated(path: Path) -> list[Path]:
    """Rotated files of one log, oldest first (the timestamp suffix sorts by time)."""
    return sorted(p for p in path.parent.glob(path.name + ".*") if not p.name.endswith(".tmp"))


def _compress(path: Path) -> None:
    tmp = path.with_name(path.name + ".gz.tmp")
    with os.fdopen(open_regular(path), "rb") as src, gzip.open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(tmp, path.with_name(path.name + ".gz"))
    path.unlink()


class ContainerLogRotator:
    """interval: containerLogMonitorInterval; workers: containerLogMaxWorkers, how many
    containers' logs are looked at and rotated at once."""

    def __init__(self, runtime: RuntimeService, max_size: int, max_files: int, interval: float = 10.0,
                 workers: int = 1) -> None:
        self.runtime = runtime
        self.max_size = max_size
        self.max_files = max_files
        self.interval = interval
        self.workers = workers
        # A container's log path is fixed when it is created: asked of the runtime once, not
        # every round (250 containers at the default 10 s were 25 ContainerStatus calls a second).
        self._log_paths: dict[str, str] = {}

    async def rotate_if_needed(self, container_id: str, path: Path) -> bool:
        try:
            if path.stat().st_size < self.max_size:
                return False
        except FileNotFoundError:
            return False
        old = _rotated(path)
        # Make room: after this rotation there is the current file plus max_files-1 rotated ones.
        for extra in old[:max(0, len(old) - (self.max_files - 2))]:
            extra.unlink(missing_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        target = path.with_name(f"{path.name}.{stamp}")
        os.rename(path, target)
        try:
            await self.runtime.reopen_container_log(container_id)
        except CRIError as exc:
            os.rename(target, path)  # the runtime still writes the old file: undo
            log.warning("log rotation of %s failed: %s", path, exc)
            return False
        for p in _rotated(path):
            if p != target and not p.name.endswith(".gz"):
                await asyncio.to_thread(_compress, p)
        return True

    async def rotate_all(self) -> int:
        running = [c.id for c in await self.runtime.list_containers({L.MANAGED_BY: "true"})
                   if c.state == cri.CONTAINER_RUNNING]
        alive = set(running)
        self._log_paths = {cid: p for cid, p in self._log_paths.items() if cid in alive}
        slots = asyncio.Semaphore(self.workers)

        async def one(container_id: str) -> bool:
            async with slots:
                path = await self._log_path(container_id)
                return bool(path) and await self.rotate_if_needed(container_id, Path(path))
        return sum(await asyncio.gather(*(one(cid) for cid in running)))

    async def _log_path(self, container_id: str) -> str:
        """The container's log file; "" without one, or when the runtime cannot tell now (asked
        again next round)."""
        if container_id not in self._log_paths:
            try:
                self._log_paths[container_id] = (await self.runtime.container_status(container_id)).log_path
            except CRIError:
                return ""
        return self._log_paths[container_id]

    async def run(self) -> None:
        while True:
            try:
                await self.rotate_all()
            except (CRIError, OSError) as exc:
                log.warning("container log rotation: %s", exc)
            await asyncio.sleep(self.interval)
