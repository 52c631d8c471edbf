"""pod-sync's side of eviction: it stops evicted pods, refuses pods under pressure, and frees
disk (dead containers, unused images) when asked."""

from __future__ import annotations

import pytest
from cri_api.v1 import api_pb2 as cri

from services.pod_sync.admission import admit_under_pressure
from services.pod_sync.disk_gc import IMAGE_GC_PERIOD, DiskReclaimer, gc_period, normalize_image
from services.status_reporter.pod_status import compute_status
from shared.bus.messages import DiskReclaimed, DiskReclaimRequested
from shared.model.podspec import validate_pod
from shared.store import DesiredPod, DiskReclaim, NodePressure, PodEviction, ReclaimRequest, Store
from tests.unit.conftest import IMG
from tests.unit.test_syncer import manifest, observed, want

MESSAGE = "The node was low on resource: memory. Container app was using 412Mi, which exceeds its request of 0. "


def as_eviction(store: Store) -> Store:
    return Store(store.path, writer="eviction")


async def evict_running_pod(syncer, rt, store, grace: int):
    """A pod runs; eviction decides to evict it with this grace; pod-sync syncs it. Returns the
    container that ran."""
    want(store, manifest(grace=30))
    await syncer.sync("uid1")
    [running] = rt.running()
    with as_eviction(store).session() as s:
        s.add(PodEviction(uid="uid1", namespace="default", name="p", signal="memory.available", message=MESSAGE,
                          grace_period_seconds=grace))
    await syncer.sync("uid1")
    return running


async def test_evicted_pod_is_killed_at_once_and_fails_with_the_message(syncer, rt, store, events):
    running = await evict_running_pod(syncer, rt, store, grace=0)
    assert not rt.running() and not any(sb.state == cri.SANDBOX_READY for sb in rt.sandboxes.values())
    assert rt.stop_timeouts[running.id] == 0, "a hard eviction does not wait out the pod's 30 s"
    with store.session() as s:
        row = s.get(DesiredPod, "uid1")
        assert (row.rejection_reason, row.rejection_message) == ("Evicted", MESSAGE)
    status, _ = compute_status(manifest(), {"sandbox_ready": False, "containers": observed(store).containers},
                               None, rejection=(row.rejection_reason, row.rejection_message))
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "Evicted", MESSAGE)
    [target] = [c for c in status["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == ("True", "TerminationByKubelet", MESSAGE)
    # Later syncs leave it down: an evicted pod is not restarted.
    await syncer.sync("uid1")
    assert not rt.running()


async def test_soft_eviction_gives_the_grace_the_eviction_service_chose(syncer, rt, store):
    running = await evict_running_pod(syncer, rt, store, grace=10)
    assert 9 <= rt.stop_timeouts[running.id] <= 10


def _pod(requests=None, tolerations=None, priority=None):
    spec = {"containers": [{"name": "c", "image": "i:1", "resources": {"requests": requests or {}}}]}
    if tolerations:
        spec["tolerations"] = tolerations
    if priority is not None:
        spec["priority"] = priority
    return validate_pod({"metadata": {"name": "p"}, "spec": spec})


def test_admission_under_pressure_as_the_kubelet():
    besteffort, burstable = _pod(), _pod({"memory": "10Mi"})
    v = admit_under_pressure(besteffort, ["MemoryPressure"], critical=False)
    assert (v.admitted, v.reason, v.message) == (False, "Evicted", "The node had condition: [MemoryPressure]. ")
    assert admit_under_pressure(burstable, ["MemoryPressure"], critical=False).admitted
    tolerant = _pod(tolerations=[{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
                                  "effect": "NoSchedule"}])
    assert admit_under_pressure(tolerant, ["MemoryPressure"], critical=False).admitted
    v = admit_under_pressure(burstable, ["MemoryPressure", "DiskPressure"], critical=False)
    assert (v.admitted, v.message) == (False, "The node had condition: [MemoryPressure DiskPressure]. ")
    assert not admit_under_pressure(burstable, ["PIDPressure"], critical=False).admitted
    assert admit_under_pressure(besteffort, ["DiskPressure"], critical=True).admitted
    assert admit_under_pressure(besteffort, [], critical=False).admitted


async def test_new_pods_are_refused_while_the_node_is_under_disk_pressure(syncer, rt, store):
    with as_eviction(store).session() as s:
        s.add(NodePressure(condition="DiskPressure", pressure=True))
    pod = manifest()
    with store.session() as s:
        s.merge(DesiredPod(uid=pod.uid, namespace="default", name="p", source="api", manifest=pod.to_manifest()))
    await syncer.sync("uid1")
    assert rt.ops("run_podsandbox") == []
    with store.session() as s:
        row = s.get(DesiredPod, "uid1")
        assert (row.admitted, row.rejection_reason) == (False, "Evicted")
        assert row.rejection_message == "The node had condition: [DiskPressure]. "
    want(store, manifest(uid="static1"))  # a static pod is critical: admitted all the same
    await syncer.sync("static1")
    assert rt.ops("run_podsandbox")


# -- disk GC -----------------------------------------------------------------------------------


class Bus:
    def __init__(self):
        self.published = []

    async def publish(self, event):
        self.published.append(event)


def test_image_names_normalized_as_the_runtime_lists_them():
    assert normalize_image("busybox") == "docker.io/library/busybox:latest"
    assert normalize_image("user/app:1") == "docker.io/user/app:1"
    assert normalize_image("127.0.0.1:5000/pykubelet/web:1.0") == "127.0.0.1:5000/pykubelet/web:1.0"
    assert normalize_image("reg.io/app") == "reg.io/app:latest"
    assert normalize_image("app@sha256:abc") == "app@sha256:abc"


async def test_reclaim_removes_unused_images_only_and_answers(syncer, rt, store):
    rt.images.update({"reg/wanted:1": "sha256:" + "b" * 64, "reg/unused:1": "sha256:" + "c" * 64,
                      "registry.k8s.io/pause:3.9": "sha256:" + "d" * 64})
    rt.image_sizes["sha256:" + "c" * 64] = 50 * 2**20
    want(store, manifest())  # runs IMG
    await syncer.sync("uid1")
    want(store, manifest(uid="later", containers=[{"name": "x", "image": "reg/wanted:1"}]))  # wanted, not started
    with as_eviction(store).session() as s:
        s.add(ReclaimRequest(id=1, sequence=3, signal="nodefs.available", bytes_to_free=2**30))
    bus = Bus()
    gc = DiskReclaimer(rt, store, bus, high_percent=85, low_percent=80, min_age=0)
    await gc.on_request(DiskReclaimRequested(sequence=3))
    assert set(rt.images) == {IMG, "reg/wanted:1", "registry.k8s.io/pause:3.9"}
    with store.session() as s:
        done = s.get(DiskReclaim, 1)
    assert (done.answered_sequence, done.images_removed, done.bytes_freed) == (3, ["reg/unused:1"], 50 * 2**20)
    assert [e.sequence for e in bus.published if isinstance(e, DiskReclaimed)] == [3]


async def test_images_younger_than_the_minimum_age_stay(syncer, rt, store):
    rt.images["reg/new:1"] = "sha256:" + "e" * 64
    clock = [100.0]
    gc = DiskReclaimer(rt, store, Bus(), 85, 80, min_age=120, clock=lambda: clock[0])
    assert (await gc.free_images(None, "test")).images == []
    clock[0] += 121
    assert sorted((await gc.free_images(None, "test")).images) == [IMG, "reg/new:1"]


async def test_reclaim_removes_old_dead_instances_but_keeps_the_newest(syncer, rt, store):
    want(store, manifest(restart="Always"))
    await syncer.sync("uid1")
    first = rt.running()[0]
    rt.exit_container(first.id, 1)
    syncer.backoff.forget("uid1/")
    await syncer.sync("uid1")
    second = rt.running()[0]
    rt.exit_container(second.id, 1)
    # Both instances are dead now; only the older goes.
    gc = DiskReclaimer(rt, store, Bus(), 85, 80, min_age=0)
    assert await gc.remove_old_dead_containers() == 1
    assert set(rt.containers) == {second.id}


def test_pods_cgroup_capped_at_allocatable_without_the_hard_thresholds(tmp_path):
    from services.pod_sync.pod_cgroup import enforce_pods_allocatable
    from shared.config.settings import KubeletConfiguration
    from shared.host.node_resources import Reservations, pods_cgroup_limits

    for controller in ("memory", "cpu", "pids"):
        (tmp_path / controller).mkdir()
    k = KubeletConfiguration.model_validate({"kubeReserved": {"memory": "512Mi", "cpu": "500m", "pid": "100"},
                                             "systemReserved": {"memory": "512Mi"}})
    limits = pods_cgroup_limits(2000, 8 * 2**30, Reservations.from_config(k), pids=20000)
    assert limits == {"cpu": 1500, "memory": 7 * 2**30, "pid": 19900}, \
        "the 100Mi hard threshold stays inside /kubepods"
    assert pods_cgroup_limits(2000, 8 * 2**30, Reservations.from_config(k), pids=20000, enforced=False) == \
        {"cpu": 2000, "memory": 8 * 2**30, "pid": 20000}, "without enforceNodeAllocatable pods: the capacity"
    assert "pid" not in pods_cgroup_limits(2000, 8 * 2**30, Reservations.from_config(k), pids=100), \
        "every pid reserved: pids.max is left as it is, never 0"
    assert enforce_pods_allocatable(limits["memory"], limits["cpu"], root=tmp_path, pids=limits["pid"]) == []
    assert (tmp_path / "memory/kubepods/memory.limit_in_bytes").read_text() == str(7 * 2**30)
    assert (tmp_path / "cpu/kubepods/cpu.shares").read_text() == str(1500 * 1024 // 1000)
    assert (tmp_path / "pids/kubepods/pids.max").read_text() == "19900"
    no_memory_controller = tmp_path / "other"
    (no_memory_controller / "cpu").mkdir(parents=True)
    problems = enforce_pods_allocatable(limits["memory"], limits["cpu"], root=no_memory_controller)
    assert len(problems) == 1 and "memory.limit_in_bytes" in problems[0], "what cannot be set is said, not raised"


@pytest.mark.parametrize("v2", [True, False])
def test_system_and_kube_reserved_limit_their_cgroups_to_what_they_reserve(tmp_path, v2):
    """enforceNodeAllocatable system-reserved / kube-reserved: each reservation's resources as
    limits of its cgroup (cpu as shares, or weight on v2); what it does not name is untouched."""
    from services.pod_sync.pod_cgroup import enforce_reserved
    from shared.config.settings import KubeletConfiguration
    from shared.host.node_resources import reserved_cgroups

    k = KubeletConfiguration.model_validate({
        "enforceNodeAllocatable": ["pods", "system-reserved", "kube-reserved"],
        "systemReservedCgroup": "/system.slice", "systemReserved": {"cpu": "100m", "pid": "1000"},
        "kubeReservedCgroup": "/kube", "kubeReserved": {"memory": "64Mi"}})
    system, kube = reserved_cgroups(k)
    if v2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
        for d in ("system.slice", "kube"):
            (tmp_path / d).mkdir()
    else:
        for d in ("cpu/system.slice", "pids/system.slice", "memory/kube"):
            (tmp_path / d).mkdir(parents=True)
    assert enforce_reserved(system, root=tmp_path) == [] and enforce_reserved(kube, root=tmp_path) == []
    written = {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    written.pop("cgroup.controllers", None)
    assert written == ({"system.slice/cpu.weight": "4", "system.slice/pids.max": "1000",
                        "kube/memory.max": str(64 * 2**20)} if v2 else
                       {"cpu/system.slice/cpu.shares": "102", "pids/system.slice/pids.max": "1000",
                        "memory/kube/memory.limit_in_bytes": str(64 * 2**20)})


def test_with_the_systemd_driver_the_reserved_slices_get_the_reservations_as_unit_properties(tmp_path):
    """cgroupDriver systemd: system.slice runs already (systemd's own), so its reservation goes
    to systemd as the unit's properties (systemd writes the files and keeps them through a
    daemon-reload); what the reservation does not name is not sent."""
    from services.pod_sync.fake_systemd import FakeSystemdBus
    from services.pod_sync.pod_cgroup import enforce_reserved
    from services.pod_sync.systemd_slices import SystemdSlices
    from shared.config.settings import KubeletConfiguration
    from shared.host.node_resources import reserved_cgroups

    k = KubeletConfiguration.model_validate({
        "cgroupDriver": "systemd", "enforceNodeAllocatable": ["pods", "system-reserved", "kube-reserved"],
        "systemReservedCgroup": "/system.slice", "systemReserved": {"cpu": "100m", "pid": "1000"},
        "kubeReservedCgroup": "/kube.slice/kube-reserved.slice", "kubeReserved": {"memory": "64Mi"}})
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    bus = FakeSystemdBus(tmp_path)
    bus.units.update({"system.slice": {}, "kube-reserved.slice": {}})
    slices = SystemdSlices(tmp_path, bus)
    system, kube = reserved_cgroups(k)
    assert enforce_reserved(system, slices=slices) == [] and enforce_reserved(kube, slices=slices) == []
    assert bus.units == {"system.slice": {"CPUWeight": 4, "TasksMax": 1000},
                         "kube-reserved.slice": {"MemoryMax": 64 * 2**20}}
    assert (tmp_path / "kube.slice/kube-reserved.slice/memory.max").read_text() == str(64 * 2**20)
    assert [m for m, _ in bus.calls] == ["SetUnitProperties"] * 2, "an existing unit is changed, never made"

    bus.refuse["system.slice"] = "org.freedesktop.DBus.Error.AccessDenied"
    problems = enforce_reserved(system, slices=slices)
    assert len(problems) == 1 and "systemd refused to change system.slice" in problems[0]


async def test_periodic_image_gc_frees_down_to_the_low_threshold_least_recently_used_first(syncer, rt, store):
    old, newer = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    rt.images.update({"reg/old:1": old, "reg/newer:1": newer})
    rt.image_sizes.update({old: 12, newer: 6})
    clock = [0.0]
    gc = DiskReclaimer(rt, store, Bus(), high_percent=85, low_percent=80, min_age=0, clock=lambda: clock[0])

    async def usage():
        return used[0], 100
    gc.imagefs_usage = usage
    used = [84]
    await gc.periodic_image_gc()
    assert {"reg/old:1", "reg/newer:1"} <= set(rt.images), "below imageGCHighThresholdPercent nothing goes"
    # reg/newer was in use more recently (a pod wanted it until now)...
    want(store, manifest(uid="w", containers=[{"name": "x", "image": "reg/newer:1"}]))
    clock[0] = 10
    await gc.free_images(0, "test")  # a pass that only notes what is in use
    with store.session() as s:
        s.delete(s.get(DesiredPod, "w"))
    used = [90]  # ... so at 90% with the goal of 80% (10 bytes), the oldest-used go first
    clock[0] = 20
    await gc.periodic_image_gc()
    assert "reg/old:1" not in rt.images and IMG not in rt.images and "reg/newer:1" in rt.images
    with store.session() as s:
        done = s.get(DiskReclaim, 1)
    assert (done.trigger, done.answered_sequence, done.bytes_freed) == ("image GC", 0, 12)


async def test_image_maximum_gc_age_removes_images_unused_that_long_whatever_the_disk(syncer, rt, store):
    from shared.config.settings import ConfigError, load_kubelet_config

    k, _ = load_kubelet_config({"imageMaximumGCAge": "1h", "imageMinimumGCAge": "1s"})
    stale, fresh = "sha256:" + "3" * 64, "sha256:" + "4" * 64
    rt.images.update({"reg/stale:1": stale, "reg/fresh:1": fresh})
    clock = [0.0]
    gc = DiskReclaimer(rt, store, Bus(), high_percent=85, low_percent=80, min_age=k.image_minimum_gc_age,
                       clock=lambda: clock[0], max_age=k.image_maximum_gc_age)

    async def usage():
        return 10, 100  # far below imageGCHighThresholdPercent
    gc.imagefs_usage = usage
    await gc.periodic_image_gc()
    assert {"reg/stale:1", "reg/fresh:1"} <= set(rt.images), "nothing is an hour old yet"
    want(store, manifest(uid="f", containers=[{"name": "x", "image": "reg/fresh:1"}]))
    clock[0] = 1800
    await gc.periodic_image_gc()  # reg/fresh is in use now; its age starts again
    with store.session() as s:
        s.delete(s.get(DesiredPod, "f"))
    clock[0] = 3700
    await gc.periodic_image_gc()
    assert "reg/stale:1" not in rt.images and "reg/fresh:1" in rt.images
    with store.session() as s:
        done = s.get(DiskReclaim, 1)
    assert done.trigger == "image max age" and "reg/stale:1" in done.images_removed
    with pytest.raises(ConfigError, match="imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"):
        load_kubelet_config({"imageMaximumGCAge": "1m"})


def test_image_gc_runs_every_quarter_of_a_short_maximum_age():
    """The kubelet's 5 minutes, unless imageMaximumGCAge is short enough that 5 minutes would
    more than add a quarter to it; never more often than every 5 s."""
    assert gc_period(0) == IMAGE_GC_PERIOD == 300
    assert gc_period(7 * 24 * 3600) == 300
    assert gc_period(60) == 15
    assert gc_period(20) == 5
    assert gc_period(2) == 5


async def test_an_image_pulled_here_ages_from_its_pull(rt, store):
    """imageMinimumGCAge counts from the pull for an image pod-sync pulled, not from the first
    listing (which, under disk pressure, is the collection itself)."""
    clock = [0.0]
    gc = DiskReclaimer(rt, store, Bus(), high_percent=85, low_percent=80, min_age=60.0, clock=lambda: clock[0])
    rt.images["reg/pulled:1"] = "sha256:" + "5" * 64
    rt.images["reg/listed:1"] = "sha256:" + "6" * 64
    gc.pulled("sha256:" + "5" * 64)
    clock[0] = 61
    result = await gc.free_images(None, "disk pressure")
    assert "reg/pulled:1" not in rt.images, result
    assert "reg/listed:1" in rt.images, "first seen only now: younger than imageMinimumGCAge"


def test_on_cgroup_v1_a_reserved_slice_gets_cpu_shares_and_memory_limit(tmp_path):
    from services.pod_sync.fake_systemd import FakeSystemdBus
    from services.pod_sync.pod_cgroup import enforce_reserved
    from services.pod_sync.systemd_slices import SystemdSlices
    from shared.config.settings import KubeletConfiguration
    from shared.host.node_resources import reserved_cgroups

    k = KubeletConfiguration.model_validate({
        "cgroupDriver": "systemd", "enforceNodeAllocatable": ["pods", "system-reserved"],
        "systemReservedCgroup": "/system.slice", "systemReserved": {"cpu": "100m", "memory": "64Mi"}})
    bus = FakeSystemdBus(tmp_path)  # cgroup v1
    bus.units["system.slice"] = {}
    (system,) = reserved_cgroups(k)
    assert enforce_reserved(system, slices=SystemdSlices(tmp_path, bus)) == []
    assert bus.units["system.slice"] == {"CPUShares": 102, "MemoryLimit": 64 * 2**20}
    assert (tmp_path / "memory/system.slice/memory.limit_in_bytes").read_text() == str(64 * 2**20)
