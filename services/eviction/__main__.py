"""eviction service entry point. Reads node signals; thresholds and evictions come later."""

from __future__ import annotations

import sys

from fastapi import APIRouter

from services.eviction.signals import node_signals
from shared.service import ServiceContext, service_main

NAME = "eviction"


async def setup(ctx: ServiceContext) -> None:
    views = APIRouter()

    @views.get("/signals")
    def signals() -> dict[str, int]:
        return node_signals(str(ctx.settings.root_dir))

    ctx.app.include_router(views)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
