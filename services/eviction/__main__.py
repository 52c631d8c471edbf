"""eviction service entry point: wiring only."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, Callable

from services.eviction.loop import EvictionLoop
from services.eviction.manager import EvictionManager
from services.eviction.memcg_notifier import MemcgNotifier, targets
from services.eviction.node_shutdown import NodeShutdownManager, shutdown_groups
from services.eviction.oom_kills import OomWatcher
from services.eviction.pod_usage import UsageCollector
from services.eviction.signals import SignalReader
from shared.bus.events import BusRecorder
from shared.bus.messages import DiskReclaimed
from shared.host.cgroups import CgroupReader
from shared.host.facts import boot_id, cpu_capacity_millicores, memory_capacity_bytes
from shared.host.node_resources import Reservations, allocatable
from shared.host.oom_kills import KMSG, KmsgReader
from shared.process.service import ServiceContext, service_main
from shared.runtime.cri import CRIClient
from shared.runtime.cri.imagefs import imagefs_mountpoint
from shared.store.pressure_report import pressure_report

if TYPE_CHECKING:
    from fastapi import APIRouter

NAME = "eviction"

log = logging.getLogger(__name__)


def memcg_notifications(loop: EvictionLoop, manager: EvictionManager, signals: SignalReader, cgroups: CgroupReader,
                        synced: Callable[[], None]) -> Callable[[], None]:
    """kernelMemcgNotification: what runs after each cycle, registering the memory thresholds
    with the kernel again when due; a crossing wakes the loop."""
    def crossed(message: str) -> None:
        log.info("%s", message)
        loop.wake.set()
    notifier = MemcgNotifier(cgroups, crossed)
    if not notifier.supported:
        log.info("kernelMemcgNotification: cgroup v2 has no memory usage thresholds to register; memory is "
                 "polled, as the kubelet does there")
        return synced

    def after_cycle() -> None:
        synced()
        notifier.refresh(lambda: targets(manager.thresholds, signals))
    return after_cycle


async def setup(ctx: ServiceContext) -> None:
    k = ctx.settings.kubelet
    cri = CRIClient.for_node(k)
    ctx.on_shutdown(cri.close)
    thresholds = k.eviction_thresholds()
    alloc = allocatable(cpu_capacity_millicores(), memory_capacity_bytes(), Reservations.from_config(k))
    cgroups = CgroupReader(kubepods=k.kubepods)
    signals = SignalReader(ctx.settings.root_dir, alloc["memory"], cgroups)
    manager = EvictionManager(ctx.store, ctx.bus, signals, UsageCollector(cri, cgroups), thresholds,
                              k.eviction_pressure_transition_period, k.eviction_max_pod_grace_period,
                              BusRecorder(ctx.bus), find_imagefs=lambda: imagefs_mountpoint(cri),
                              local_storage=k.local_storage_capacity_isolation)
    if not k.local_storage_capacity_isolation:
        log.info("localStorageCapacityIsolation false: emptyDir sizeLimit and ephemeral-storage limits are not "
                 "enforced")
    loop = EvictionLoop(manager)

    async def on_reclaimed(_event: DiskReclaimed) -> None:
        loop.wake.set()

    await ctx.bus.subscribe(DiskReclaimed, on_reclaimed)

    def views() -> APIRouter:
        from fastapi import APIRouter

        r = APIRouter()

        @r.get("/eviction")
        def eviction() -> dict[str, Any]:
            return pressure_report(ctx.store)

        @r.get("/signals")
        def signal_views() -> list[dict[str, Any]]:
            signals: list[dict[str, Any]] = pressure_report(ctx.store)["signals"]
            return signals
        return r

    ctx.app.add_views(views)
    after_cycle = ctx.synced
    if k.kernel_memcg_notification:
        after_cycle = memcg_notifications(loop, manager, signals, cgroups, ctx.synced)
    ctx.spawn("eviction-cycles", loop.run_cycles(after_cycle))
    ctx.spawn("memory-poll", loop.poll_memory())
    try:
        kmsg = KmsgReader()
    except OSError as exc:  # a unit or container without /dev/kmsg: the rest of eviction runs
        log.warning("cannot read OOM kills from %s (%s): no SystemOOM events, and "
                    "container_oom_events_total stays 0", KMSG, exc)
    else:
        ctx.spawn("oom-kills", OomWatcher(ctx.store, ctx.bus, kmsg).run())
    groups = shutdown_groups(k)
    if groups:
        from services.eviction.logind import Logind

        shutdowns = NodeShutdownManager(ctx.store, ctx.bus, Logind(), groups, boot_id())
        ctx.spawn("node-shutdown", shutdowns.run())


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
