"""status-reporter service entry point: wiring only."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from services.status_reporter.reporter import PodStatusReporter
from shared.bus.messages import (
    DesiredPodsChanged,
    KubeEvent,
    MirrorPodsChanged,
    NodePressureChanged,
    NodeShutdownChanged,
    PodRuntimeChanged,
    PodStatusChanged,
    ProbeResultsChanged,
)
from shared.host.facts import cpu_capacity_millicores, node_address
from shared.process.service import ServiceContext, service_main
from shared.tasks.coalesce import Coalescer

if TYPE_CHECKING:
    from fastapi import APIRouter

NAME = "status-reporter"
log = logging.getLogger(__name__)


async def setup(ctx: ServiceContext) -> None:
    reporter = PodStatusReporter(ctx.store, ctx.bus)
    # Events only name pods; one task recomputes the union of what changed since its last pass.
    changes = Coalescer("pod status refresh", lambda uids: reporter.on_pods(None if uids is None else sorted(uids)))

    await ctx.bus.subscribe(PodRuntimeChanged, changes.handle)
    await ctx.bus.subscribe(DesiredPodsChanged, changes.handle)
    await ctx.bus.subscribe(ProbeResultsChanged, changes.handle)
    ctx.spawn("pod-status-changes", changes.run())

    def views() -> APIRouter:
        from services.status_reporter.views import router
        return router(ctx.store)

    ctx.app.add_views(views)
    ctx.spawn("pod-status-resync", reporter.run_resync(ctx.synced))
    if ctx.settings.cluster_mode:
        await start_cluster_mode(ctx)


async def start_cluster_mode(ctx: ServiceContext) -> None:
    # What only cluster mode uses (the API client, the kubeconfig loader) is loaded only then.
    from services.status_reporter.api_pods import ApiPodStatusWriter
    from services.status_reporter.client_cert import ClientCertificate
    from services.status_reporter.events import EventPoster
    from services.status_reporter.mirror_pods import MirrorPods
    from services.status_reporter.node_agent import NodeAgent, Registration
    from shared.api.client import node_api_client
    from shared.host.node_resources import Reservations

    k = ctx.settings.kubelet
    api = node_api_client(ctx.settings)
    certs = ClientCertificate(ctx.settings)
    if certs.wanted:
        ctx.spawn("client-certificate", certs.run(api), may_finish=True)
    events = EventPoster(api, ctx.settings.node_name, k.event_record_qps, k.event_burst)
    node_ip = node_address(ctx.settings.node_ip)
    agent = NodeAgent(api, ctx.store, ctx.settings.node_name, str(ctx.settings.root_dir),
                      k.pod_capacity(cpu_capacity_millicores() // 1000),
                      k.node_lease_duration_seconds, k.node_status_update_frequency,
                      k.node_status_report_frequency, events.node_event, kubelet_port=k.port, node_ip=node_ip,
                      reservations=Reservations.from_config(k),
                      registration=Registration(k.register_node, [t.model_dump(exclude_defaults=True)
                                                                  for t in k.register_with_taints],
                                                k.provider_id, ctx.settings.node_labels),
                      max_images=k.node_status_max_images, local_storage=k.local_storage_capacity_isolation)
    pods = ApiPodStatusWriter(api, ctx.store, node_ip)
    mirrors = MirrorPods(api, ctx.store, ctx.settings.node_name, lambda: agent.node_uid, node_ip)

    async def write(uids: set[str] | None) -> None:
        try:
            await pods.sync(None if uids is None else sorted(uids))
        except Exception as exc:  # the periodic pass retries
            log.warning("pod status update failed: %s", exc)

    # API writes wait for the QPS budget: batch them instead of queueing the bus behind them.
    to_write = Coalescer("API pod status", write)
    await ctx.bus.subscribe(KubeEvent, events.submit)
    await ctx.bus.subscribe(PodStatusChanged, to_write.handle)
    await ctx.bus.subscribe(DesiredPodsChanged, to_write.handle)
    ctx.spawn("api-pod-status-changes", to_write.run())
    ctx.checks["registered"] = lambda: (agent.registered.is_set(), "ok" if agent.registered.is_set()
                                        else "node not registered yet" + (f" ({certs.state})" if certs.state else ""))

    async def on_conditions(event: NodePressureChanged | NodeShutdownChanged) -> None:
        if agent.registered.is_set():
            try:
                await agent.report_status()
            except Exception as exc:  # the periodic update retries
                log.warning("node status update after a %s failed: %s", type(event).__name__, exc)

    await ctx.bus.subscribe(NodePressureChanged, on_conditions)
    await ctx.bus.subscribe(NodeShutdownChanged, on_conditions)
    mirror_changes = Coalescer("mirror pod sync", mirrors.on_pods)
    for event in (MirrorPodsChanged, DesiredPodsChanged, PodStatusChanged):
        await ctx.bus.subscribe(event, mirror_changes.handle)
    ctx.spawn("mirror-pod-changes", mirror_changes.run())
    ctx.spawn("node-agent", agent.run())
    ctx.spawn("api-pod-status", pods.run())
    ctx.spawn("mirror-pods", mirrors.run(mirror_changes))
    ctx.spawn("events", events.run())
    ctx.on_shutdown(api.close)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
