"""SystemOOM: the Node's event when the kernel's OOM killer kills a process outside every
container (task_memcg "/"), as the kubelet's OOM watcher reports it: "System OOM encountered,
victim process: NAME, pid: N". A kill inside a container's cgroup is the container's own
(OOMKilled in its status), not the node's."""

from __future__ import annotations

import asyncio
import logging

from shared.bus.client import Bus
from shared.bus.messages import KubeEvent
from shared.host import oom_kills

log = logging.getLogger(__name__)

QUEUE = 64  # events waiting for the bus; more in a burst are logged, not sent (events are best effort)


def system_oom_event(kill: oom_kills.OomKill) -> KubeEvent | None:
    if kill.victim_memcg != "/":
        return None
    message = "System OOM encountered"
    if kill.task and kill.pid:
        message += f", victim process: {kill.task}, pid: {kill.pid}"
    return KubeEvent(kind="Node", type="Warning", reason="SystemOOM", message=message)


async def report_system_ooms(bus: Bus, kmsg: str = oom_kills.KMSG) -> None:
    """Publish a SystemOOM event for each such kill from now on, until cancelled."""
    queue: asyncio.Queue[KubeEvent] = asyncio.Queue(QUEUE)

    def seen(kill: oom_kills.OomKill) -> None:
        event = system_oom_event(kill)
        if event is None:
            return
        log.warning("%s (the node ran out of memory)", event.message)
        try:
            queue.put_nowait(event)
        except asyncio.QueueFull:
            log.warning("SystemOOM event not sent: %d are already waiting for the bus", QUEUE)

    async def send() -> None:
        while True:
            event = await queue.get()
            try:
                await bus.publish(event)
            except Exception as exc:  # the bus is down: the kill is logged above
                log.warning("SystemOOM event not sent: %s", exc)

    sender = asyncio.create_task(send(), name="system-oom-events")
    try:
        await oom_kills.watch(seen, kmsg)
    except OSError as exc:
        log.warning("cannot read OOM kills from %s (%s): no SystemOOM events", kmsg, exc)
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
