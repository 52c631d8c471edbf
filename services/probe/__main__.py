"""probe service entry point. No probe workers yet: it runs, reports healthy and lists none."""

from __future__ import annotations

import sys

from fastapi import APIRouter

from shared.service import ServiceContext, service_main

NAME = "probe"


async def setup(ctx: ServiceContext) -> None:
    views = APIRouter()

    @views.get("/probes")
    def probes() -> list[dict]:
        return []  # one entry per probe worker once probing is implemented

    ctx.app.include_router(views)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
