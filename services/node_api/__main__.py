"""node-api service entry point: the kubelet API (HTTPS on `port`, the read-only port when set)
plus the loopback admin views."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from services.node_api.debug_flags import DebugFlags
from services.node_api.healthz import serve_healthz
from services.node_api.kubelet_api import KubeletAPI
from services.node_api.listeners import node_metrics_source, start_listeners
from services.node_api.log_query import NodeLogQuery
from services.node_api.pods import pod_list
from services.node_api.stats.provider import StatsProvider
from services.node_api.system_logs import NODE_LOG_DIR, SystemLogs
from shared.process.service import ServiceContext, service_main
from shared.process.tuning import raise_open_files_limit
from shared.runtime.cri import CRIClient

if TYPE_CHECKING:
    from fastapi import APIRouter

NAME = "node-api"

log = logging.getLogger(__name__)


async def setup(ctx: ServiceContext) -> None:
    # Before the listeners, which size their connection limit by it.
    before, after = raise_open_files_limit()
    if after != before:
        log.info("open files limit raised from %d to %d", before, after)
    k = ctx.settings.kubelet
    runtime = CRIClient.for_node(k)
    ctx.on_shutdown(runtime.close)
    stats = StatsProvider(runtime, runtime, ctx.store, ctx.settings)
    ctx.on_shutdown(stats.close)
    debug_flags = DebugFlags(ctx.store, ctx.bus, k.logging.verbosity)
    await debug_flags.start()
    node_logs = SystemLogs(query=NodeLogQuery(NODE_LOG_DIR) if k.enable_system_log_query else None)
    kubelet = KubeletAPI(ctx.settings, ctx.store, runtime, stats, node_metrics_source(ctx), node_logs=node_logs,
                         debug_flags=debug_flags)
    await start_listeners(ctx, kubelet)
    if k.healthz_port:  # whatever enableServer says, as the kubelet's
        ctx.spawn("healthz", serve_healthz(ctx, k.healthz_bind_address, k.healthz_port))

    def views() -> APIRouter:
        from fastapi import APIRouter

        r = APIRouter()

        @r.get("/pods")
        def pods() -> dict[str, Any]:
            return pod_list(ctx.store)
        return r

    ctx.app.add_views(views)
    ctx.synced()  # it serves what others own; its one table (log_verbosity) was cleared at its start


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
