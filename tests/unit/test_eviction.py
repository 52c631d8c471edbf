"""The eviction manager against a real SQLite store, with fake signals, usage and bus."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.eviction.manager import CLEANUP_WAIT, EvictionManager
from services.eviction.pod_usage import ActivePod, PodUsage
from services.eviction.ranking import binary_quantity, eviction_message, rank, storage_limit_violation
from services.eviction.signals import Observed, SignalReader
from shared.bus.events import RecordingRecorder
from shared.bus.messages import DiskReclaimRequested, EvictionsDecided, NodePressureChanged
from shared.config.settings import ConfigError, KubeletConfiguration, load_kubelet_config
from shared.host.cgroups import CgroupReader
from shared.model.podspec import Pod
from shared.store import DesiredPod, DiskReclaim, NodePressure, PodEviction, PodRuntime, PodVolume, Store
from shared.store.pressure_report import pressure_report

GIB, MIB = 2**30, 2**20


def pod(name: str, requests: dict | None = None, limits: dict | None = None, priority: int | None = None,
        volumes: list | None = None, containers: list | None = None) -> Pod:
    spec: dict = {"containers": containers or [{"name": name, "image": "i:1", "resources": {
        "requests": requests or {}, "limits": limits or {}}}]}
    if priority is not None:
        spec["priority"] = priority
    if volumes:
        spec["volumes"] = volumes
    return Pod.from_manifest({"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
                              "spec": spec})


def active(p: Pod, source: str = "api", empty_dirs: dict | None = None) -> ActivePod:
    return ActivePod(p.uid, p, source, {c.name: f"cid-{c.name}" for c in p.spec.containers},
                     empty_dirs=empty_dirs or {})


# -- config ------------------------------------------------------------------------------------


def test_thresholds_as_quantities_and_percentages():
    k, _ = load_kubelet_config({"evictionHard": {"memory.available": "500Mi", "nodefs.available": "12.5%"},
                                "evictionSoft": {"memory.available": "1Gi"},
                                "evictionSoftGracePeriod": {"memory.available": "1m30s"},
                                "evictionMinimumReclaim": {"memory.available": "200Mi"}})
    by = {(t.signal, t.hard): t for t in k.eviction_thresholds()}
    assert by[("memory.available", True)].value.of(8 * GIB) == 500 * MIB
    assert by[("nodefs.available", True)].value.of(80 * GIB) == 10 * GIB
    soft = by[("memory.available", False)]
    assert (soft.value.of(0), soft.grace_period, soft.min_reclaim.of(0)) == (GIB, 90.0, 200 * MIB)


def test_defaults_are_the_kubelets():
    k = KubeletConfiguration()
    assert k.eviction_hard == {"memory.available": "100Mi", "nodefs.available": "10%",
                               "nodefs.inodesFree": "5%", "imagefs.available": "15%", "imagefs.inodesFree": "5%"}
    assert (k.eviction_pressure_transition_period, k.image_gc_high_threshold_percent,
            k.image_gc_low_threshold_percent, k.image_minimum_gc_age) == (300.0, 85, 80, 120.0)
    assert k.enforce_node_allocatable == ["pods"]


@pytest.mark.parametrize("data, needle", [
    ({"evictionHard": {"memory.avail": "1Gi"}}, "evictionHard: unsupported eviction signal 'memory.avail'"),
    ({"evictionHard": {"memory.available": "lots"}}, "evictionHard[memory.available]: 'lots' is not a quantity"),
    ({"evictionHard": {"nodefs.available": "-5%"}}, "evictionHard[nodefs.available]: percentage '-5%'"),
    ({"evictionHard": {"memory.available": "-1Gi"}}, "must not be negative"),
    ({"evictionSoft": {"memory.available": "1Gi"}}, "evictionSoft[memory.available]: needs a grace period"),
    ({"evictionSoftGracePeriod": {"memory.available": "soon"}}, "evictionSoftGracePeriod[memory.available]"),
    ({"evictionMaxPodGracePeriod": -1}, "evictionMaxPodGracePeriod"),
    ({"kubeReserved": {"gpu": "1"}}, "kubeReserved: cannot reserve 'gpu'"),
    ({"systemReserved": {"memory": "a lot"}}, "systemReserved[memory]"),
    ({"enforceNodeAllocatable": ["kube-reserved"]}, 'kubeReservedCgroup (--kube-reserved-cgroup) must be specified '
                                                     'when "kube-reserved" contained in enforceNodeAllocatable'),
    ({"enforceNodeAllocatable": ["system-reserved"], "systemReservedCgroup": "/system",
      "cgroupDriver": "systemd"}, "'/system': with cgroupDriver systemd it names a slice unit, as /system.slice"),
    ({"enforceNodeAllocatable": ["kube-reserved"], "kubeReservedCgroup": "/kube-reserved.slice",
      "cgroupDriver": "systemd"}, "systemd keeps the slice kube-reserved.slice at /kube.slice/kube-reserved.slice"),
    ({"systemReservedCgroup": "/a/../../etc"}, "systemReservedCgroup: '/a/../../etc' is not a cgroup path"),
    ({"kubeReservedCgroup": "kube.slice"}, "give it from the cgroup root"),
    ({"enforceNodeAllocatable": ["pods", "reserved"]}, "unknown value 'reserved'"),
    ({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60}, "must be less than"),
    ({"imageGCHighThresholdPercent": 101}, "imageGCHighThresholdPercent"),
    ({"evictionPressureTransitionPeriod": "forever"}, "evictionPressureTransitionPeriod"),
])
def test_bad_eviction_config_names_the_field(data, needle):
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config(data)
    assert needle in str(exc.value)


# -- signals -----------------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_signals_as_the_kubelet_computes_them(tmp_path):
    cg, proc = tmp_path / "cgroup", tmp_path / "proc"
    _write(cg / "cpuacct/cpuacct.usage", "1")
    _write(cg / "memory/memory.usage_in_bytes", str(3 * GIB))
    _write(cg / "memory/memory.stat", f"total_inactive_file {GIB // 2}\ninactive_file 1\n")
    _write(cg / "cpuacct/kubepods/cpuacct.usage", "1")
    _write(cg / "memory/kubepods/memory.usage_in_bytes", str(GIB))
    _write(cg / "memory/kubepods/memory.stat", f"total_inactive_file {GIB // 4}\n")
    _write(proc / "meminfo", f"MemTotal:       {8 * GIB // 1024} kB\nMemAvailable:   {7 * GIB // 1024} kB\n")
    _write(proc / "loadavg", "0.10 0.20 0.30 2/345 6789\n")
    _write(proc / "sys/kernel/pid_max", "32768\n")
    _write(proc / "sys/kernel/threads-max", "20000\n")  # fewer: the node's pid capacity, as the kubelet's
    reader = SignalReader(tmp_path, allocatable_memory=6 * GIB, cgroups=CgroupReader(cg, proc), proc=proc)
    obs = reader.all()
    # Working set = usage - inactive file: page cache that is active counts as used.
    assert obs["memory.available"] == Observed(8 * GIB - (3 * GIB - GIB // 2), 8 * GIB)
    assert obs["allocatableMemory.available"] == Observed(6 * GIB - (GIB - GIB // 4), 6 * GIB)
    assert obs["pid.available"] == Observed(20000 - 345, 20000)
    assert obs["nodefs.available"].capacity > 0 and obs["imagefs.available"] == obs["nodefs.available"]


# -- ranking and messages ----------------------------------------------------------------------


def test_memory_ranking_puts_usage_above_requests_first_then_priority():
    hog, guaranteed = pod("hog"), pod("g", {"memory": "1Gi"}, {"memory": "1Gi"})
    low, critical = pod("low", {"memory": "10Mi"}, priority=-5), pod("crit", priority=2_000_000_000)
    static = pod("static")
    pods = [active(guaranteed), active(hog), active(low), active(critical), active(static, source="file")]
    usage = {"uid-hog": PodUsage(memory=400 * MIB), "uid-g": PodUsage(memory=900 * MIB),
             "uid-low": PodUsage(memory=20 * MIB), "uid-crit": PodUsage(memory=5 * GIB),
             "uid-static": PodUsage(memory=5 * GIB)}
    order = [p.pod.metadata.name for p in rank(pods, usage, "memory")]
    # Both over their requests: the lower priority goes first, whatever it uses; the Guaranteed
    # pod under its request last; static and critical pods are never candidates.
    assert order == ["low", "hog", "g"]


def test_pid_ranking_by_priority_then_processes():
    a, b, c = pod("a"), pod("b"), pod("c", priority=10)
    usage = {"uid-a": PodUsage(processes=5), "uid-b": PodUsage(processes=50), "uid-c": PodUsage(processes=500)}
    assert [p.pod.metadata.name for p in rank([active(a), active(b), active(c)], usage, "pids")] == ["b", "a", "c"]


def test_the_kubelets_eviction_message():
    hog = active(pod("hog"))
    usage = PodUsage(memory=412 * MIB, containers_memory={"hog": 412 * MIB})
    assert eviction_message("memory", hog, usage) == (
        "The node was low on resource: memory. Container hog was using 412Mi, which exceeds its request of 0. ")
    under = active(pod("g", {"memory": "1Gi"}))
    assert eviction_message("memory", under, PodUsage(containers_memory={"g": 100 * MIB})) == \
        "The node was low on resource: memory. "
    assert binary_quantity(432013312 + 4096) == "421892Ki"


def test_local_storage_limits_in_the_kubelets_order_and_words():
    vols = [{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}]
    p = active(pod("fill", volumes=vols), empty_dirs={"scratch": (20 * MIB, 10 * MIB)})
    assert storage_limit_violation(p, PodUsage()) == 'Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". '
    two = active(pod("two", containers=[
        {"name": "writer", "image": "i:1", "resources": {"limits": {"ephemeral-storage": "50Mi"}}},
        {"name": "idle", "image": "i:1", "resources": {"limits": {"ephemeral-storage": "100Mi"}}}]))
    assert storage_limit_violation(two, PodUsage(rootfs={"writer": 60 * MIB, "idle": 0})) == \
        'Container writer exceeded its local ephemeral storage limit "50Mi". '
    assert storage_limit_violation(two, PodUsage(rootfs={"writer": 60 * MIB, "idle": 0},
                                                 logs={"idle": 100 * MIB})) == \
        "Pod ephemeral local storage usage exceeds the total limit of containers 150Mi. "
    assert storage_limit_violation(two, PodUsage(rootfs={"writer": 40 * MIB})) == ""


# -- the manager -------------------------------------------------------------------------------


class FakeSignals:
    def __init__(self) -> None:
        self.obs = {"memory.available": Observed(4 * GIB, 8 * GIB),
                    "nodefs.available": Observed(50 * GIB, 100 * GIB),
                    "pid.available": Observed(30000, 32768)}
        self.imagefs = Path("/")

    def memory(self, signals=frozenset({"memory.available", "allocatableMemory.available"})):
        return {k: v for k, v in self.obs.items() if k in signals}

    def filesystems(self):
        return {k: v for k, v in self.obs.items() if "fs." in k}

    def all(self):
        return dict(self.obs)


class FakeUsage:
    def __init__(self) -> None:
        self.usage: dict[str, PodUsage] = {}

    def memory_and_processes(self, pods):
        return {p.uid: self.usage.get(p.uid, PodUsage()) for p in pods}

    async def with_storage(self, pods):
        return self.memory_and_processes(pods)


class FakeBus:
    def __init__(self) -> None:
        self.published: list = []

    async def publish(self, event) -> None:
        self.published.append(event)

    def of(self, kind):
        return [e for e in self.published if isinstance(e, kind)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(tmp_path):
    """The store with pods running (written as pod-sync would), and a manager over it."""
    path = tmp_path / "state.db"
    podsync = Store(path, writer="pod-sync")
    podsync.create_schema()
    signals, usage, bus, clock, events = FakeSignals(), FakeUsage(), FakeBus(), Clock(), RecordingRecorder()

    def add(p: Pod, source: str = "api") -> None:
        with podsync.session() as s:
            s.add(DesiredPod(uid=p.uid, namespace="default", name=p.metadata.name, source=source,
                             manifest=p.model_dump(exclude_none=True), admitted=True))
            s.add(PodRuntime(uid=p.uid, containers=[{"name": c.name, "state": "running",
                                                     "container_id": f"containerd://cid-{c.name}"}
                                                    for c in p.spec.containers]))

    def make(config: dict, **kw) -> EvictionManager:
        k, _ = load_kubelet_config(config)
        store = Store(path, writer="eviction")
        return EvictionManager(store, bus, signals, usage, k.eviction_thresholds(),
                               k.eviction_pressure_transition_period, k.eviction_max_pod_grace_period,
                               events, clock=clock, local_storage=k.local_storage_capacity_isolation)

    class World:
        pass
    w = World()
    w.signals, w.usage, w.bus, w.clock, w.events, w.add, w.make, w.podsync = \
        signals, usage, bus, clock, events, add, make, podsync
    w.store = Store(path, writer=None)
    return w


def rows(store: Store, model) -> list:
    from sqlalchemy import select
    with store.session() as s:
        return list(s.scalars(select(model)))


def pressure(store: Store) -> dict[str, bool]:
    return {r.condition: r.pressure for r in rows(store, NodePressure)}


HARD_MEMORY = {"evictionHard": {"memory.available": "1Gi"}, "evictionPressureTransitionPeriod": "30s"}


async def test_hard_memory_threshold_evicts_the_hog_and_holds_the_condition(world):
    hog, guaranteed = pod("hog"), pod("g", {"memory": "1Gi"}, {"memory": "1Gi"})
    world.add(hog)
    world.add(guaranteed)
    world.usage.usage = {hog.uid: PodUsage(memory=412 * MIB, containers_memory={"hog": 412 * MIB}),
                         guaranteed.uid: PodUsage(memory=900 * MIB)}
    m = world.make(HARD_MEMORY)
    assert await m.synchronize() == []
    assert pressure(world.store) == {"MemoryPressure": False, "DiskPressure": False, "PIDPressure": False}

    world.signals.obs["memory.available"] = Observed(900 * MIB, 8 * GIB)
    assert m.memory_threshold_met()
    assert await m.synchronize() == [hog.uid]
    [decision] = rows(world.store, PodEviction)
    assert (decision.uid, decision.grace_period_seconds, decision.signal) == (hog.uid, 0, "memory.available")
    assert decision.message == ("The node was low on resource: memory. Container hog was using 412Mi, "
                                "which exceeds its request of 0. ")
    assert ("Warning", "Evicted", decision.message) in world.events.events
    assert world.bus.of(EvictionsDecided)[0].uids == [hog.uid]
    assert pressure(world.store)["MemoryPressure"] and world.bus.of(NodePressureChanged)

    # Still short while the hog goes away: nobody else is evicted until it is gone (or too long).
    world.clock.now += 1
    assert await m.synchronize() == []
    # Memory is back: the condition holds for the transition period, then clears.
    world.signals.obs["memory.available"] = Observed(4 * GIB, 8 * GIB)
    world.clock.now += 10
    await m.synchronize()
    assert pressure(world.store)["MemoryPressure"]
    assert 0 < m.next_transition_in() <= 20
    world.clock.now += 21
    await m.synchronize()
    assert not pressure(world.store)["MemoryPressure"]


async def test_memory_ranking_counts_the_allocated_request_not_a_resize_still_pending(world):
    """a asked (by a resize the node has not granted) for 1Gi more than it was allocated; it
    is ranked by the 0 it has, so its 500Mi is over its request, and b's 400Mi is within its own."""
    a, b = pod("a", {"memory": "1Gi"}), pod("b", {"memory": "512Mi"})
    world.add(a)
    world.add(b)
    with world.podsync.session() as s:
        s.get(DesiredPod, a.uid).allocated = {"a": {"requests": {}, "limits": {}}}
    world.usage.usage = {a.uid: PodUsage(memory=500 * MIB), b.uid: PodUsage(memory=400 * MIB)}
    world.signals.obs["memory.available"] = Observed(100 * MIB, 8 * GIB)
    assert await world.make(HARD_MEMORY).synchronize() == [a.uid]


def two_pods_short_of_memory(world) -> tuple[Pod, Pod]:
    """a uses 500Mi, b 100Mi, neither requested any; the node has 100Mi left (threshold 1Gi)."""
    a, b = pod("a"), pod("b")
    world.add(a)
    world.add(b)
    world.usage.usage = {a.uid: PodUsage(memory=500 * MIB), b.uid: PodUsage(memory=100 * MIB)}
    world.signals.obs["memory.available"] = Observed(100 * MIB, 8 * GIB)
    return a, b


async def test_next_eviction_waits_for_the_last_one_to_clean_up(world):
    a, b = two_pods_short_of_memory(world)
    m = world.make(HARD_MEMORY)
    assert await m.synchronize() == [a.uid]
    world.clock.now += CLEANUP_WAIT + 1
    assert await m.synchronize() == [b.uid]


async def test_a_restarted_manager_still_waits_for_the_evicted_pod(world):
    a, b = two_pods_short_of_memory(world)
    assert await world.make(HARD_MEMORY).synchronize() == [a.uid]
    restarted = world.make(HARD_MEMORY)  # a's containers still run: b is not next yet
    assert await restarted.synchronize() == []
    world.clock.now += CLEANUP_WAIT + 1
    assert await restarted.synchronize() == [b.uid]


async def test_soft_threshold_waits_its_grace_period_and_caps_the_pod_grace(world):
    p = pod("p")
    world.add(p)
    m = world.make({"evictionHard": {}, "evictionSoft": {"memory.available": "1Gi"},
                    "evictionSoftGracePeriod": {"memory.available": "1m"}, "evictionMaxPodGracePeriod": 10})
    world.signals.obs["memory.available"] = Observed(900 * MIB, 8 * GIB)
    assert await m.synchronize() == []
    assert pressure(world.store)["MemoryPressure"]  # the condition does not wait for the grace period
    world.clock.now += 61
    assert await m.synchronize() == [p.uid]
    # A soft eviction gives the pod min(its grace period (30 s), evictionMaxPodGracePeriod).
    assert rows(world.store, PodEviction)[0].grace_period_seconds == 10


async def test_minimum_reclaim_keeps_the_threshold_until_enough_is_back(world):
    m = world.make({"evictionHard": {"memory.available": "1Gi"}, "evictionMinimumReclaim": {"memory.available": "500Mi"},
                    "evictionPressureTransitionPeriod": "1ms"})
    world.signals.obs["memory.available"] = Observed(900 * MIB, 8 * GIB)
    await m.synchronize()
    world.signals.obs["memory.available"] = Observed(GIB + 100 * MIB, 8 * GIB)
    world.clock.now += 1
    await m.synchronize()
    assert pressure(world.store)["MemoryPressure"]  # above 1Gi, not yet above 1Gi + 500Mi
    world.signals.obs["memory.available"] = Observed(2 * GIB, 8 * GIB)
    world.clock.now += 1
    await m.synchronize()
    assert not pressure(world.store)["MemoryPressure"]


async def test_static_and_critical_pods_are_never_evicted(world):
    static, critical = pod("static"), pod("crit", priority=2_000_000_000)
    world.add(static, source="file")
    world.add(critical)
    world.usage.usage = {static.uid: PodUsage(memory=5 * GIB), critical.uid: PodUsage(memory=5 * GIB)}
    world.signals.obs["memory.available"] = Observed(100 * MIB, 8 * GIB)
    m = world.make(HARD_MEMORY)
    assert await m.synchronize() == []
    assert rows(world.store, PodEviction) == []
    assert pressure(world.store)["MemoryPressure"]


async def test_disk_pressure_reclaims_before_it_evicts(world):
    filler = pod("filler")
    world.add(filler)
    world.usage.usage = {filler.uid: PodUsage(volumes=5 * GIB)}
    m = world.make({"evictionHard": {"nodefs.available": "10%"}})
    world.signals.obs["nodefs.available"] = Observed(5 * GIB, 100 * GIB)
    assert await m.synchronize() == []
    [ask] = world.bus.of(DiskReclaimRequested)
    assert pressure(world.store)["DiskPressure"]
    world.clock.now += 1
    assert await m.synchronize() == []  # pod-sync has not answered yet

    with world.podsync.session() as s:  # pod-sync answers: images freed, still short
        s.merge(DiskReclaim(id=1, answered_sequence=ask.sequence, bytes_freed=GIB, images_removed=["big:1"]))
    world.clock.now += 1
    assert await m.synchronize() == [filler.uid]
    assert rows(world.store, PodEviction)[0].message == "The node was low on resource: ephemeral-storage. "


async def test_disk_pressure_ends_without_eviction_when_reclaim_is_enough(world):
    filler = pod("filler")
    world.add(filler)
    m = world.make({"evictionHard": {"nodefs.available": "10%"}})
    world.signals.obs["nodefs.available"] = Observed(5 * GIB, 100 * GIB)
    await m.synchronize()
    [ask] = world.bus.of(DiskReclaimRequested)
    world.signals.obs["nodefs.available"] = Observed(30 * GIB, 100 * GIB)
    with world.podsync.session() as s:
        s.merge(DiskReclaim(id=1, answered_sequence=ask.sequence, bytes_freed=25 * GIB))
    world.clock.now += 1
    assert await m.synchronize() == []
    assert rows(world.store, PodEviction) == []


async def test_empty_dir_over_its_size_limit_is_evicted_whatever_the_node_has(world):
    vols = [{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}]
    over, under = pod("over", volumes=vols), pod("under", volumes=vols)
    world.add(over)
    world.add(under)
    vol = Store(world.store.path, writer="volume")
    with vol.session() as s:
        s.add(PodVolume(pod_uid=over.uid, name="scratch", plugin="kubernetes.io/empty-dir", ready=True,
                        size_limit_bytes=10 * MIB, used_bytes=11 * MIB))
        s.add(PodVolume(pod_uid=under.uid, name="scratch", plugin="kubernetes.io/empty-dir", ready=True,
                        size_limit_bytes=10 * MIB, used_bytes=9 * MIB))
    m = world.make(HARD_MEMORY)
    assert await m.synchronize() == [over.uid]
    [decision] = rows(world.store, PodEviction)
    assert decision.message == 'Usage of EmptyDir volume "scratch" exceeds the limit "10Mi". '
    assert decision.signal == "local-storage"


async def test_without_local_storage_capacity_isolation_no_local_storage_limit_evicts(world):
    vols = [{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}]
    over = pod("over", volumes=vols)
    world.add(over)
    with Store(world.store.path, writer="volume").session() as s:
        s.add(PodVolume(pod_uid=over.uid, name="scratch", plugin="kubernetes.io/empty-dir", ready=True,
                        size_limit_bytes=10 * MIB, used_bytes=11 * MIB))
    m = world.make({**HARD_MEMORY, "localStorageCapacityIsolation": False})
    assert await m.synchronize() == []
    assert rows(world.store, PodEviction) == []


async def evicted_hog(world) -> EvictionManager:
    """A manager that has just evicted the one pod, "hog" (412Mi used), at 900Mi available."""
    hog = pod("hog")
    world.add(hog)
    world.usage.usage = {hog.uid: PodUsage(memory=412 * MIB, containers_memory={"hog": 412 * MIB})}
    world.signals.obs["memory.available"] = Observed(900 * MIB, 8 * GIB)
    m = world.make(HARD_MEMORY)
    assert await m.synchronize() == [hog.uid]
    return m


async def test_decisions_for_pods_gone_from_the_node_are_dropped(world):
    m = await evicted_hog(world)
    with world.podsync.session() as s:
        s.query(DesiredPod).delete()
        s.query(PodRuntime).delete()
    world.clock.now += 1
    await m.synchronize()
    assert rows(world.store, PodEviction) == []


async def test_view_shows_signals_thresholds_and_last_evictions(world):
    await evicted_hog(world)
    view = pressure_report(world.store)
    mem = next(s for s in view["signals"] if s["signal"] == "memory.available")
    assert mem["hard"] == {"threshold": "1Gi", "thresholdValue": GIB, "headroom": 900 * MIB - GIB, "met": True}
    assert view["evictions"][0]["pod"] == "default/hog"
    assert {c["type"]: c["status"] for c in view["conditions"]}["MemoryPressure"] is True


async def test_pykubelet_status_shows_pressure_signals_and_evictions(world):
    from services.cli.status_cmd import render_pressure

    await evicted_hog(world)
    text = "\n".join(render_pressure(pressure_report(world.store)))
    assert "pressure: MemoryPressure (memory.available 900Mi < 1024Mi (hard threshold 1Gi))" in text
    assert "memory.available             900.0Mi of 8.0Gi available, hard < 1Gi: MET" in text
    assert "nodefs.available             50.0Gi of 100.0Gi available" in text
    assert "evicted default/hog at " in text and "Container hog was using 412Mi" in text


async def test_memory_is_read_more_often_the_closer_it_is_to_a_threshold(world):
    import asyncio

    from services.eviction.loop import MEMORY_GROWTH, MEMORY_POLL, EvictionLoop
    from services.eviction.manager import MONITORING_PERIOD

    m = world.make(HARD_MEMORY)  # memory.available < 1Gi
    loop = EvictionLoop(m)
    world.signals.obs["memory.available"] = Observed(7 * GIB, 8 * GIB)
    assert m.memory_headroom() == 6 * GIB
    assert loop.next_poll_in(m.memory_headroom()) == min(MONITORING_PERIOD, 6 * GIB / MEMORY_GROWTH)
    world.signals.obs["memory.available"] = Observed(1 * GIB + 100 * MIB, 8 * GIB)
    assert loop.next_poll_in(m.memory_headroom()) == MEMORY_POLL, "100Mi from the threshold: every 0.5 s"
    world.signals.obs["memory.available"] = Observed(900 * MIB, 8 * GIB)
    assert m.memory_headroom() == -124 * MIB and m.memory_threshold_met()

    # The poll itself: the threshold met wakes the cycle at once.
    task = asyncio.create_task(loop.poll_memory())
    try:
        await asyncio.wait_for(loop.wake.wait(), MEMORY_POLL * 4)
    finally:
        task.cancel()

    no_memory = world.make({"evictionHard": {"nodefs.available": "10%"}})
    assert no_memory.memory_headroom() is None
    assert EvictionLoop(no_memory).next_poll_in(None) == MONITORING_PERIOD
