"""The kernel's OOM kills, as the kubelet's OOM watcher takes them (shared/host/oom_kills.py):
counted by the cgroup whose memory ran out, in the store, for node-api's
container_oom_events_total; and a node-wide one (not at a container's limit) is the Node's
SystemOOM event: "System OOM encountered, victim process: NAME, pid: N".

Only this service reads the kernel's log: node-api, which listens on the network, reads the
counts from the store."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import delete, select

from shared.bus.client import Bus
from shared.bus.messages import KubeEvent
from shared.host import oom_kills
from shared.store import OomKill, Store
from shared.store.models import utcnow

log = logging.getLogger(__name__)

QUEUE = 256  # kills waiting to be written and said; more in a burst are logged, not counted
MAX_CGROUPS = 4096  # rows kept; past this the longest-quiet go (a gone container's, mostly)


def system_oom_event(kill: oom_kills.OomKill) -> KubeEvent | None:
    if kill.victim_memcg != "/":
        return None
    message = "System OOM encountered"
    if kill.task and kill.pid:
        message += f", victim process: {kill.task}, pid: {kill.pid}"
    return KubeEvent(kind="Node", type="Warning", reason="SystemOOM", message=message)


def count(store: Store, cgroup: str) -> None:
    with store.session() as s:
        row = s.get(OomKill, cgroup)
        if row is None:
            s.add(OomKill(cgroup=cgroup, count=1))
        else:
            row.count, row.last_at = row.count + 1, utcnow()
        kept = select(OomKill.cgroup).order_by(OomKill.last_at.desc()).limit(MAX_CGROUPS)
        s.execute(delete(OomKill).where(OomKill.cgroup.not_in(kept)))


class OomWatcher:
    def __init__(self, store: Store, bus: Bus, reader: oom_kills.KmsgReader) -> None:
        self.store, self.bus, self.reader = store, bus, reader
        self._queue: asyncio.Queue[oom_kills.OomKill] = asyncio.Queue(QUEUE)

    def seen(self, kill: oom_kills.OomKill) -> None:
        log.info("OOM kill in %s: %s (pid %d) in %s", kill.memcg, kill.task, kill.pid, kill.victim_memcg)
        try:
            self._queue.put_nowait(kill)
        except asyncio.QueueFull:
            log.warning("OOM kill in %s not counted: %d are already waiting", kill.memcg, QUEUE)

    async def run(self) -> None:
        """Read the kernel's log and record what it says, until cancelled."""
        reading = asyncio.create_task(oom_kills.watch(self.reader, self.seen), name="kmsg-reader")
        reading.add_done_callback(_log_stop)
        try:
            while True:
                kill = await self._queue.get()
                try:
                    await self.store.run(count, self.store, kill.memcg)
                except Exception as exc:  # the store is busy or gone: the kill is logged above
                    log.warning("OOM kill in %s not counted: %s", kill.memcg, exc)
                event = system_oom_event(kill)
                if event is not None:
                    log.warning("%s (the node ran out of memory)", event.message)
                    try:
                        await self.bus.publish(event)
                    except Exception as exc:  # events are best effort
                        log.warning("SystemOOM event not sent: %s", exc)
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)


def _log_stop(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("reading OOM kills from the kernel's log stopped: %s; no more are counted",
                  task.exception())
