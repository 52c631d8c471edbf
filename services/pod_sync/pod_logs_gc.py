"""Removing the log directories of pods that are gone, as the kubelet's container GC does.

A directory under podLogsDir named <namespace>_<name>_<uid> whose pod is neither wanted (the
store) nor has a sandbox in the runtime, and that nothing has written to for MIN_AGE, is removed.
The delay leaves a pod's last words readable for a while after it is deleted (`pykubelet logs`,
a test that checks what a preStop hook printed).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import time
from pathlib import Path

from sqlalchemy import select

from shared.runtime.cri import RuntimeService
from shared.runtime.cri import labels as L
from shared.store import DesiredPod, Store

log = logging.getLogger(__name__)

GC_PERIOD = 60.0
MIN_AGE = 60.0
# What pod_log_dir makes: namespace and name are DNS names (no '_'), the UID the last field.
_POD_LOG_DIR = re.compile(r"^[a-z0-9][a-z0-9.-]*_[a-z0-9][a-z0-9.-]*_(?P<uid>[A-Za-z0-9][A-Za-z0-9._-]*)$")


class PodLogsGC:
    def __init__(self, runtime: RuntimeService, store: Store, logs_dir: str) -> None:
        self.runtime = runtime
        self.store = store
        self.logs_dir = Path(logs_dir)

    async def collect(self, now: float | None = None) -> list[str]:
        """Remove what is due; return the directory names removed."""
        now = time.time() if now is None else now
        try:
            entries = [e for e in os.scandir(self.logs_dir) if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return []
        with self.store.session() as s:
            keep = set(s.scalars(select(DesiredPod.uid)))
        keep |= {sb.labels.get(L.POD_UID, "") for sb in await self.runtime.list_pod_sandbox({L.MANAGED_BY: "true"})}
        # In a thread: a pod's logs are as many and as large as its containers made them.
        removed = await asyncio.to_thread(_remove_old, entries, keep, now)
        if removed:
            log.info("removed the logs of %d deleted pod(s): %s", len(removed), ", ".join(sorted(removed)))
        return removed


def _newest_mtime(path: str) -> float:
    newest = os.lstat(path).st_mtime
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                continue
    return newest


def _remove_old(entries: list[os.DirEntry[str]], keep: set[str], now: float) -> list[str]:
    """Remove the log directories of pods not in keep whose newest file is over MIN_AGE old."""
    removed = []
    for entry in entries:
        m = _POD_LOG_DIR.match(entry.name)
        if m is None or m.group("uid") in keep:
            continue
        if now - _newest_mtime(entry.path) < MIN_AGE:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    return removed
