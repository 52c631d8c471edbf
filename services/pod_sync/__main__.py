"""pod-sync service entry point: wiring only."""

from __future__ import annotations

import sys

from services.pod_sync.backoff import Backoff
from services.pod_sync.images import ImageManager
from services.pod_sync.manager import PodSyncManager
from services.pod_sync.static_source import StaticPodSource
from services.pod_sync.syncer import PodSyncer
from services.pod_sync.views import router
from shared.cri import CRIClient
from shared.runtime_check import runtime_ready_check
from shared.service import ServiceContext, service_main

NAME = "pod-sync"
IMAGE_BACKOFF_INITIAL, IMAGE_BACKOFF_CAP = 10.0, 300.0


async def setup(ctx: ServiceContext) -> None:
    k = ctx.settings.kubelet
    cri = CRIClient(k.container_runtime_endpoint)
    crash = Backoff(k.crash_loop_back_off.initial_container_restart_period,
                    k.crash_loop_back_off.max_container_restart_period)
    images = ImageManager(cri, Backoff(IMAGE_BACKOFF_INITIAL, IMAGE_BACKOFF_CAP))
    syncer = PodSyncer(cri, images, ctx.store, ctx.settings, crash)
    source = StaticPodSource(k.static_pod_path, ctx.settings.node_name, ctx.store, k.file_check_frequency)
    manager = PodSyncManager(syncer, source, ctx.bus, resync_every=k.sync_frequency)

    ctx.app.include_router(router(ctx.store))
    ctx.checks["runtime"] = runtime_ready_check(cri, ctx)
    ctx.checks["pleg"] = manager.pleg.healthy
    await manager.start(ctx.spawn)
    ctx.on_shutdown(manager.close)
    ctx.on_shutdown(cri.close)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
