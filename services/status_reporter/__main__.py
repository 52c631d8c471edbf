"""status-reporter service entry point: wiring only."""

from __future__ import annotations

import sys

from services.status_reporter.reporter import PodStatusReporter
from services.status_reporter.views import router
from shared.bus import DesiredPodsChanged, PodRuntimeChanged, ProbeResultsChanged
from shared.service import ServiceContext, service_main

NAME = "status-reporter"


async def setup(ctx: ServiceContext) -> None:
    reporter = PodStatusReporter(ctx.store, ctx.bus)

    async def on_event(event) -> None:
        await reporter.on_pods(event.uids)

    await ctx.bus.subscribe(PodRuntimeChanged, on_event)
    await ctx.bus.subscribe(DesiredPodsChanged, on_event)
    await ctx.bus.subscribe(ProbeResultsChanged, on_event)
    ctx.app.include_router(router(ctx.store))
    ctx.spawn("pod-status-resync", reporter.run_resync())


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
