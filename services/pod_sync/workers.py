"""One worker per pod: syncs of a pod never overlap, and a newer request replaces a queued one.

Each request says why the pod is synced, as the kubelet's pod workers do: "update" (its
source, a probe, a volume or an eviction changed something) or "sync" (the periodic resync, a
retry). Requests that fold into one sync keep the strongest reason; the sync is told it."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from services.pod_sync.syncer import ERROR_RETRY, SyncResult

log = logging.getLogger(__name__)

SyncFn = Callable[[str, str], Awaitable[SyncResult]]  # (uid, "update" or "sync")
_STRENGTH = {"sync": 0, "update": 1}

# No single pod sync may hang the worker forever (a stuck runtime call has its own deadline too).
SYNC_TIMEOUT = 15 * 60.0


class PodWorkers:
    def __init__(self, sync: SyncFn, max_concurrent: int = 16) -> None:
        self._sync = sync
        self._pending: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._limit = asyncio.Semaphore(max_concurrent)
        self._closed = False
        self._waiters: list[tuple[set[str], asyncio.Event]] = []
        self._reasons: dict[str, str] = {}

    def update(self, uid: str, reason: str = "update") -> None:
        """Ask for a sync of this pod ("update" or "sync"); cheap and idempotent."""
        if self._closed:
            return
        if _STRENGTH[reason] >= _STRENGTH[self._reasons.get(uid, "sync")]:
            self._reasons[uid] = reason
        event = self._pending.setdefault(uid, asyncio.Event())
        event.set()
        if uid not in self._tasks:
            self._tasks[uid] = asyncio.create_task(self._run(uid), name=f"pod-worker:{uid}")

    def update_after(self, uid: str, delay: float) -> None:
        old = self._timers.pop(uid, None)
        if old is not None:
            if old.when() <= asyncio.get_running_loop().time() + delay:
                self._timers[uid] = old
                return
            old.cancel()
        self._timers[uid] = asyncio.get_running_loop().call_later(delay, self._fire_timer, uid)

    def _fire_timer(self, uid: str) -> None:
        self._timers.pop(uid, None)
        self.update(uid, "sync")

    @property
    def active(self) -> list[str]:
        return list(self._tasks)

    async def synced_once(self, uids: set[str]) -> None:
        """Wait until each of these pods has finished a sync. Call right after update(): the
        waiter is in place before any of those syncs can run."""
        left = set(uids) & (set(self._pending) | set(self._tasks))
        if not left:
            return
        done = asyncio.Event()
        entry = (left, done)
        self._waiters.append(entry)
        try:
            await done.wait()
        finally:
            self._waiters.remove(entry)

    def _finished(self, uid: str) -> None:
        for left, done in self._waiters:
            left.discard(uid)
            if not left:
                done.set()

    async def _run(self, uid: str) -> None:
        event = self._pending[uid]
        try:
            while event.is_set():
                event.clear()
                reason = self._reasons.pop(uid, "sync")
                async with self._limit:
                    try:
                        result = await asyncio.wait_for(self._sync(uid, reason), SYNC_TIMEOUT)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("sync of pod %s failed; retrying in %.0fs", uid, ERROR_RETRY)
                        result = SyncResult(requeue_after=ERROR_RETRY)
                self._finished(uid)
                if result.gone:
                    timer = self._timers.pop(uid, None)
                    if timer:
                        timer.cancel()
                elif result.requeue_after is not None:
                    self.update_after(uid, result.requeue_after)
        finally:
            self._tasks.pop(uid, None)
            if not event.is_set():
                self._pending.pop(uid, None)
                self._reasons.pop(uid, None)
            elif not self._closed:
                # An update arrived as we were leaving: serve it.
                self._tasks[uid] = asyncio.create_task(self._run(uid), name=f"pod-worker:{uid}")

    async def close(self) -> None:
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
