"""probe service entry point: wiring only."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from services.probe.manager import ProbeManager
from shared.bus.events import BusRecorder
from shared.bus.messages import PodLifecycleEvents, PodRuntimeChanged
from shared.process.service import ServiceContext, service_main
from shared.runtime.cri import CRIClient
from shared.tasks.coalesce import Coalescer

if TYPE_CHECKING:
    from fastapi import APIRouter

NAME = "probe"


async def setup(ctx: ServiceContext) -> None:
    cri = CRIClient.for_node(ctx.settings.kubelet)
    manager = ProbeManager(ctx.store, ctx.bus, cri, BusRecorder(ctx.bus))
    manager.load_results()

    changes = Coalescer("probe reconcile", manager.reconcile)

    async def on_lifecycle(event: PodLifecycleEvents) -> None:
        changes.add({e.pod_uid for e in event.events})

    await ctx.bus.subscribe(PodRuntimeChanged, changes.handle)
    await ctx.bus.subscribe(PodLifecycleEvents, on_lifecycle)
    ctx.spawn("probe-changes", changes.run())

    def views() -> APIRouter:
        from fastapi import APIRouter

        r = APIRouter()

        @r.get("/probes")
        def probes() -> list[dict[str, Any]]:
            return manager.view()
        return r

    ctx.app.add_views(views)
    ctx.spawn("probe-reconcile", manager.run(ctx.synced))
    ctx.on_shutdown(manager.close)
    ctx.on_shutdown(cri.close)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
