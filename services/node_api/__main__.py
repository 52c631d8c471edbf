"""node-api service entry point: the kubelet's read-only views (HTTPS on 10250 comes later)."""

from __future__ import annotations

import sys

from fastapi import APIRouter

from services.node_api.pods import pod_list
from shared.service import ServiceContext, service_main

NAME = "node-api"


async def setup(ctx: ServiceContext) -> None:
    views = APIRouter()

    @views.get("/pods")
    def pods() -> dict:
        return pod_list(ctx.store)

    ctx.app.include_router(views)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
