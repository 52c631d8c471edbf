"""pod-sync service entry point: wiring only."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

from services.pod_sync.cpu_manager import CPUManager, CPUSetReconciler, load_assignments
from services.pod_sync.disk_gc import DiskReclaimer, gc_period
from services.pod_sync.images import ImageManager
from services.pod_sync.log_rotation import ContainerLogRotator
from services.pod_sync.manager import PodSyncManager
from services.pod_sync.memory_qos import memory_protection, memory_throttling, oom_group
from services.pod_sync.node_health import NodeHealthWriter
from services.pod_sync.pod_cgroup import enforce_pods_allocatable, enforce_reserved
from services.pod_sync.pod_logs_gc import GC_PERIOD as LOGS_GC_PERIOD
from services.pod_sync.pod_logs_gc import PodLogsGC
from services.pod_sync.pull_records import Policy, PullRecords
from services.pod_sync.resources import CGROUP_ROOT, own_oom_score_adj
from services.pod_sync.runtime_config import NodeFacts
from services.pod_sync.static_source import StaticPodSource
from services.pod_sync.syncer import PodSyncer
from services.pod_sync.systemd_slices import SystemdSlices
from shared.bus.events import BusRecorder
from shared.bus.messages import DiskReclaimRequested, MirrorPodsChanged
from shared.config.settings import ConfigError
from shared.host.checks import startup_problems
from shared.host.cpu_topology import numa_nodes
from shared.host.facts import (
    cpu_capacity_millicores,
    kernel_refuses_negative_oom_score_adj,
    memory_capacity_bytes,
    node_address,
    task_max,
)
from shared.host.node_resources import Reservations, pods_cgroup_limits, reserved_cgroups
from shared.host.swap import node_swap
from shared.model.cgroup_names import SYSTEMD
from shared.model.cpusets import format_cpuset
from shared.model.quantity import to_bytes
from shared.process.service import ServiceContext, service_main
from shared.runtime.cri import CRIClient, CRIError
from shared.tasks import periodic
from shared.tasks.retry import Backoff

if TYPE_CHECKING:
    from fastapi import APIRouter

NAME = "pod-sync"
log = logging.getLogger(__name__)
IMAGE_BACKOFF_INITIAL, IMAGE_BACKOFF_CAP = 10.0, 300.0


async def setup(ctx: ServiceContext) -> None:
    k = ctx.settings.kubelet
    problems = startup_problems(k)  # the host as the configuration wants it, as the kubelet checks
    if problems:
        raise ConfigError("not starting: " + "; ".join(problems))
    cri = CRIClient.for_node(k)
    cpu, memory, reservations = cpu_capacity_millicores(), memory_capacity_bytes(), Reservations.from_config(k)
    node = NodeFacts(name=ctx.settings.node_name, ip=node_address(ctx.settings.node_ip), cpu_millicores=cpu,
                     memory_bytes=memory,
                     oom_floor=own_oom_score_adj() if kernel_refuses_negative_oom_score_adj() else None,
                     pods_dir=ctx.settings.root_dir / "pods", seccomp_default=k.seccomp_default,
                     labels=ctx.settings.node_labels,
                     cgroup_slices=SystemdSlices(CGROUP_ROOT) if k.cgroup_driver == SYSTEMD else None,
                     kubepods=k.kubepods,
                     guaranteed_mems=format_cpuset(numa_nodes()) if k.memory_manager_policy == "Static" else "",
                     swap=node_swap(k.memory_swap.swap_behavior), cpu_cfs_quota=k.cpu_cfs_quota,
                     cpu_cfs_period=k.cpu_cfs_period_us,
                     memory_throttling=memory_throttling(k.memory_throttling_factor, CGROUP_ROOT,
                                                         pods_cgroup_limits(cpu, memory, reservations)["memory"]),
                     memory_protection=memory_protection(k.memory_reservation_policy, CGROUP_ROOT),
                     oom_group=oom_group(k.single_process_oom_kill, CGROUP_ROOT))
    crash = Backoff(k.crash_loop_back_off.initial_container_restart_period,
                    k.crash_loop_back_off.max_container_restart_period)
    records = PullRecords(ctx.settings.root_dir / "image_manager",
                          Policy(k.image_pull_credentials_verification_policy, k.preloaded_images_verification_allowlist))
    try:
        records.prepare([(i.id, [*i.repo_tags, *i.repo_digests]) for i in await cri.list_images()])
    except CRIError as exc:
        log.warning("image pull records: the runtime's images are unknown (%s); interrupted pulls stay "
                    "unresolved and their images verified", exc)
        records.prepare(None)
    images = ImageManager(cri, Backoff(IMAGE_BACKOFF_INITIAL, IMAGE_BACKOFF_CAP), k.image_pull_parallelism,
                          k.registry_pull_qps, k.registry_burst, records)
    recorder = BusRecorder(ctx.bus)
    sources: list[Any] = [StaticPodSource(k.static_pod_path, ctx.settings.node_name, ctx.store, k.file_check_frequency)]
    if k.static_pod_url:
        from services.pod_sync.url_source import URLPodSource

        sources.append(URLPodSource(k.static_pod_url, k.static_pod_url_header, ctx.settings.node_name, ctx.store,
                                    k.http_check_frequency))
    env_source = None
    if ctx.settings.cluster_mode:
        # What only cluster mode uses (the API client, the kubeconfig loader) is loaded only then.
        from services.pod_sync.api_source import ApiPodSource
        from services.pod_sync.env_sources import ApiEnvSource
        from shared.api.client import node_api_client

        api = node_api_client(ctx.settings)
        sources.append(ApiPodSource(api, ctx.settings.node_name, ctx.store, events=recorder,
                                    on_mirror=lambda: ctx.bus.publish(MirrorPodsChanged())))
        env_source = ApiEnvSource(api)
        ctx.spawn("watch-services", env_source.watch_services())
        ctx.on_shutdown(api.close)
    cpus = CPUManager.from_config(k.cpu_manager_policy, k.reserved_system_cpus, reservations.reserved_amount("cpu"),
                                  k.cpu_policy_options)
    if cpus.static:
        cpus.assignments = await ctx.store.run(load_assignments, ctx.store)  # the CPUs given out before a restart
    syncer = PodSyncer(cri, images, ctx.store, ctx.settings, crash, node, recorder, env_source, cpus=cpus)
    if cpus.static:
        ctx.spawn("cpu-manager", CPUSetReconciler(cpus, cri, ctx.store, node, syncer.pod_at_allocation,
                                                  k.cpu_manager_reconcile_period).run())
    manager = PodSyncManager(syncer, sources, ctx.bus, resync_every=k.sync_frequency,
                             pleg_period=ctx.settings.pleg_relist_period, on_synced=ctx.synced)


    def views() -> APIRouter:
        from services.pod_sync.views import router
        return router(ctx.store)

    ctx.app.add_views(views)
    ctx.checks["pleg"] = manager.pleg.healthy
    rotator = ContainerLogRotator(cri, to_bytes(k.container_log_max_size), k.container_log_max_files,
                                  k.container_log_monitor_interval, k.container_log_max_workers)
    await manager.start(ctx.spawn)
    ctx.spawn("container-log-rotation", rotator.run())
    logs_gc = PodLogsGC(cri, ctx.store, k.pod_logs_dir)
    ctx.spawn("pod-logs-gc", periodic.every(LOGS_GC_PERIOD, "removing deleted pods' logs", logs_gc.collect, log))
    reclaimer = DiskReclaimer(cri, ctx.store, ctx.bus, k.image_gc_high_threshold_percent,
                              k.image_gc_low_threshold_percent, k.image_minimum_gc_age,
                              max_age=k.image_maximum_gc_age)
    health = NodeHealthWriter(cri, ctx.store, manager.pleg.healthy, ctx.bus)

    def pulled(image_id: str) -> None:
        reclaimer.pulled(image_id)
        health.images_changed()  # the Node lists it at its next status update
    images.on_pulled = pulled
    reclaimer.on_removed = health.images_changed
    reclaimer.on_removed_ids = records.forget
    await ctx.bus.subscribe(DiskReclaimRequested, reclaimer.on_request)
    ctx.spawn("image-gc", periodic.every(gc_period(k.image_maximum_gc_age), "image garbage collection",
                                         reclaimer.periodic_image_gc, log))
    # As the kubelet, whether or not enforceNodeAllocatable has "pods": then with the capacity.
    limits = pods_cgroup_limits(cpu, memory, reservations, task_max(), enforced=k.enforces_pods_allocatable)
    for problem in enforce_pods_allocatable(limits["memory"], limits["cpu"], slices=node.cgroup_slices,
                                            kubepods=node.kubepods, pids=limits.get("pid")):
        log.warning("node allocatable: cannot limit the pods cgroup: %s", problem)
    for reserved in reserved_cgroups(k):
        for problem in enforce_reserved(reserved, slices=node.cgroup_slices):
            log.warning("enforceNodeAllocatable %s: cannot limit %s: %s", reserved.key, reserved.cgroup, problem)
    # The QoS tiers below it, as the kubelet's QoS manager sets them at its start: for the pods
    # admitted so far, with the memory protection a run under TieredReservation left reset to 0
    # when the policy is None now.
    await syncer.update_qos_tiers()
    ctx.checks["runtime"] = health.runtime_ready
    ctx.spawn("node-health", health.run())
    ctx.on_shutdown(manager.close)
    ctx.on_shutdown(cri.close)


if __name__ == "__main__":
    sys.exit(service_main(NAME, setup))
