"""volume service entry point. No volume plugins yet: it runs, reports healthy and lists none."""

from __future__ import annotations

import sys

from fastapi import APIRouter

from shared.service import ServiceContext, service_main

NAME = "volume"


async def setup(ctx: ServiceContext) -> None:
    views = APIRouter()

    @views.get("/volumes")
    def volumes() -> list[dict]:
        return []  # one entry per mounted pod volume once volumes are implemented

    ctx.app.include_router(views)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
