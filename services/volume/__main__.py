"""volume service entry point: wiring only."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from services.volume import metrics as M
from services.volume.csi_volumes import CSIVolumes
from services.volume.manager import VolumeManager
from services.volume.objects import STANDALONE_OBJECTS, ObjectSource
from services.volume.paths import Layout
from services.volume.projection import NodeAllocatable
from services.volume.registry import PluginRegistry
from services.volume.teardown import done_with
from shared.bus.events import BusRecorder
from shared.bus.messages import DesiredPodsChanged, PodRuntimeChanged
from shared.host.facts import cpu_capacity_millicores, memory_capacity_bytes
from shared.host.mounts import tmpfs_noswap_supported
from shared.host.propagation import make_rshared
from shared.host.swap import swap_capacity_bytes
from shared.process.service import ServiceContext, service_main
from shared.runtime.cri import CRIClient
from shared.store import DesiredPod
from shared.tasks.periodic import every

if TYPE_CHECKING:
    from fastapi import APIRouter

NAME = "volume"
log = logging.getLogger(__name__)
# Volumes are checked against the store and disk this often even without events (a configMap
# change arrives by watch; this is the safety net, like the kubelet's volume reconciler).
RESYNC_PERIOD = 10.0


async def setup(ctx: ServiceContext) -> None:
    k = ctx.settings.kubelet
    # Before any volume is ready (no container mounts one before): mount propagation needs it.
    make_rshared(ctx.settings.root_dir)
    layout = Layout(ctx.settings.root_dir)
    cri = CRIClient.for_node(k, timeout=30.0)
    registry = PluginRegistry(layout.registry)
    objects: ObjectSource = STANDALONE_OBJECTS
    api_objects = None
    events = BusRecorder(ctx.bus)
    if ctx.settings.cluster_mode:
        # What only cluster mode uses (the API client, the kubeconfig loader) is loaded only then.
        from services.volume.api_objects import ApiObjects
        from shared.api.client import node_api_client

        api = node_api_client(ctx.settings)
        objects = api_objects = ApiObjects(api, strategy=k.config_map_and_secret_change_detection_strategy,
                                           node_name=ctx.settings.node_name, events=events)
        M.POD_CERTIFICATE_STATES.source = api_objects.certificates.states
        ctx.on_shutdown(api_objects.close)
        ctx.on_shutdown(api.close)
    node = NodeAllocatable(cpu_capacity_millicores(), memory_capacity_bytes())
    if swap_capacity_bytes() and not tmpfs_noswap_supported():
        log.warning("swap is on and this kernel's tmpfs has no noswap option (Linux 6.4 and later have it): "
                    "memory-backed volumes (secrets, tokens, emptyDir medium Memory) may be swapped to disk")
    manager = VolumeManager(ctx.store, ctx.bus, layout, CSIVolumes(layout, registry, objects, ctx.settings.node_name),
                            objects, node, cri, events, RESYNC_PERIOD)
    # A newly registered driver may unblock volumes; a changed configMap/secret updates its pods.
    registry.on_change = lambda driver: manager.wake(None)
    if api_objects is not None:
        api_objects.on_change = manager.wake_for_object

    async def on_desired(event: DesiredPodsChanged) -> None:
        manager.wake(event.uids)

    async def on_runtime(event: PodRuntimeChanged) -> None:
        # Only pods pod-sync has finished with matter here: their volumes may now go.
        with ctx.store.session() as s:
            done = [uid for uid in event.uids if done_with(s.get(DesiredPod, uid))]
        if done:
            manager.wake(done)

    await ctx.bus.subscribe(DesiredPodsChanged, on_desired)
    await ctx.bus.subscribe(PodRuntimeChanged, on_runtime)

    def views() -> APIRouter:
        from services.volume.views import router
        return router(ctx.store, manager, registry)

    ctx.app.add_views(views)
    ctx.checks["volumes"] = lambda: (manager.reconciled.is_set(), "first volume reconcile not done yet")
    ctx.spawn("plugin-registry", registry.run())
    ctx.spawn("volume-reconcile", manager.run(before_first=registry.scanned, on_synced=ctx.synced))
    ctx.spawn("volume-stats", every(k.volume_stats_agg_period, "volume stats", manager.collect_stats, log))
    ctx.on_shutdown(registry.close)
    ctx.on_shutdown(cri.close)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
