"""memory.high from memoryThrottlingFactor and memory.min / memory.low from memoryReservationPolicy
(services/pod_sync/memory_qos.py), with the kubelet 1.37's formulas and rounding, and where they
go: the container's CRI resources, the pod cgroup, the QoS tiers."""

import dataclasses

import pytest

from services.pod_sync.memory_qos import (
    MemoryProtection,
    MemoryThrottling,
    container_memory_high,
    container_memory_protection,
    memory_protection,
    memory_throttling,
    oom_group,
    pod_memory_high,
    pod_memory_protection,
    tier_memory_protection,
)
from services.pod_sync.pod_cgroup import PodCgroupConfig, ensure
from services.pod_sync.runtime_config import NodeFacts, linux_resources
from shared.config.settings import ConfigError, load_kubelet_config
from shared.model.podspec import validate_pod
from shared.model.qos import qos_class
from shared.store import DesiredPod
from tests.unit.conftest import IMG

MI = 2**20
T = MemoryThrottling(factor=0.9, allocatable=3 * 1024 * MI, page=4096)


def pod(*resources, pod_resources=None):
    spec = {"containers": [{"name": f"c{i}", "image": IMG, "resources": r} for i, r in enumerate(resources)]}
    if pod_resources is not None:
        spec["resources"] = pod_resources
    return validate_pod({"metadata": {"name": "p", "uid": "uid1"}, "spec": spec})


def test_a_burstable_container_is_throttled_between_its_request_and_its_limit():
    p = pod({"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}})
    # floor(64Mi + 0.9 x 192Mi) = 248302796, down to a page.
    assert container_memory_high(p.spec.containers[0], p, T) == 248299520


def test_without_a_limit_the_node_allocatable_memory_is_the_ceiling():
    p = pod({})
    assert container_memory_high(p.spec.containers[0], p, T) == int(0.9 * 3 * 1024 * MI) // 4096 * 4096


def test_a_guaranteed_container_and_a_value_not_above_the_request_get_none():
    g = pod({"limits": {"memory": "64Mi", "cpu": "100m"}})
    assert container_memory_high(g.spec.containers[0], g, T) is None
    tight = pod({"requests": {"memory": "64Mi"}, "limits": {"memory": "64Mi", "cpu": "1"}})
    assert container_memory_high(tight.spec.containers[0], tight, T) is None
    low = pod({"requests": {"memory": "64Mi"}, "limits": {"memory": "65Mi"}})
    assert container_memory_high(low.spec.containers[0], low, MemoryThrottling(0.0001, T.allocatable)) is None


def test_with_a_pod_level_memory_limit_the_pod_cgroup_is_throttled_not_the_unlimited_container():
    p = pod({}, {"limits": {"memory": "32Mi"}}, pod_resources={"requests": {"memory": "100Mi"},
                                                               "limits": {"memory": "200Mi"}})
    assert container_memory_high(p.spec.containers[0], p, T) is None
    assert container_memory_high(p.spec.containers[1], p, T) is None, "request defaults to its limit: Guaranteed-like"
    assert pod_memory_high(p, T) == int(100 * MI + 0.9 * 100 * MI) // 4096 * 4096
    assert pod_memory_high(pod({"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}}), T) is None, \
        "without pod-level resources the pod cgroup has none"


def test_the_container_gets_it_through_the_cri_and_the_pod_cgroup_as_a_file(tmp_path):
    p = pod({"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}})
    node = NodeFacts("n", "10.0.0.1", 2000, 4 * 1024 * MI, None, tmp_path, memory_throttling=T)
    res = linux_resources(p, p.spec.containers[0], qos_class(p), node)
    assert res.unified["memory.high"] == "248299520" and res.memory_limit_in_bytes == 256 * MI
    unthrottled = NodeFacts("n", "10.0.0.1", 2000, 4 * 1024 * MI, None, tmp_path)
    assert "memory.high" not in linux_resources(p, p.spec.containers[0], qos_class(p), unthrottled).unified
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    assert ensure("/kubepods/burstable/poduid1", PodCgroupConfig(2, None, 200 * MI, None, 180 * MI), tmp_path) == []
    assert (tmp_path / "kubepods/burstable/poduid1/memory.high").read_text() == str(180 * MI)


def test_the_factor_is_checked_as_the_kubelet_checks_it_and_does_nothing_on_cgroup_v1(tmp_path, caplog):
    assert load_kubelet_config({"memoryThrottlingFactor": 0.8})[0].memory_throttling_factor == 0.8
    for bad in (0, 1.5, -0.1):
        with pytest.raises(ConfigError, match=f"memoryThrottlingFactor {float(bad)} must be greater than 0 and less "
                                              "than or equal to 1.0"):
            load_kubelet_config({"memoryThrottlingFactor": bad})
    assert memory_throttling(None, tmp_path, 1) is None
    assert memory_throttling(0.9, tmp_path, 1) is None
    assert "memory.high exists on cgroup v2 only" in caplog.text
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    assert memory_throttling(0.9, tmp_path, 7) == MemoryThrottling(0.9, 7)


def test_with_the_systemd_driver_the_pods_memory_high_is_a_slice_property():
    from services.pod_sync.systemd_slices import properties

    props = dict(properties(PodCgroupConfig(2, None, 200 * MI, None, 180 * MI), 100_000, 1))
    assert props["MemoryHigh"] == ("t", 180 * MI) and props["MemoryMax"] == ("t", 200 * MI)
    assert "MemoryHigh" not in dict(properties(PodCgroupConfig(2, None, 200 * MI), 100_000, 1)), "left as it is"


# -- memoryReservationPolicy: memory.min and memory.low ------------------------------------------

TIERED, RESET = MemoryProtection(tiered=True), MemoryProtection(tiered=False)


def test_tiered_reservation_protects_a_guaranteed_request_hard_and_a_burstable_one_softly():
    g = pod({"limits": {"memory": "64Mi", "cpu": "100m"}})
    b = pod({"requests": {"memory": "32Mi"}, "limits": {"memory": "256Mi"}}, {"requests": {"cpu": "10m"}})
    e = pod({})
    assert container_memory_protection(g.spec.containers[0], g, TIERED) == {"memory.min": str(64 * MI)}
    assert container_memory_protection(b.spec.containers[0], b, TIERED) == {"memory.low": str(32 * MI)}
    zeros = {"memory.min": "0", "memory.low": "0"}
    assert container_memory_protection(b.spec.containers[1], b, TIERED) == zeros, "no memory request: nothing kept"
    assert container_memory_protection(e.spec.containers[0], e, TIERED) == zeros
    assert container_memory_protection(g.spec.containers[0], g, RESET) == zeros, "policy None: reset"
    # The pod's cgroup takes the pod's whole request; under None it is left as a new cgroup has it (0).
    assert pod_memory_protection(g, TIERED) == {"memory.min": 64 * MI}
    assert pod_memory_protection(b, TIERED) == {"memory.low": 32 * MI}
    assert pod_memory_protection(e, TIERED) == {} and pod_memory_protection(g, RESET) == {}
    assert tier_memory_protection([g, b, e, g], TIERED) == (128 * MI, 32 * MI)
    assert tier_memory_protection([g, b], RESET) == (0, 0)


def test_the_policy_is_checked_as_the_kubelet_checks_it_and_does_nothing_on_cgroup_v1(tmp_path, caplog):
    assert load_kubelet_config({})[0].memory_reservation_policy == "None"
    k, refused_at_default = load_kubelet_config({"memoryReservationPolicy": "TieredReservation"})
    assert k.memory_reservation_policy == "TieredReservation" and "memoryReservationPolicy" not in refused_at_default
    with pytest.raises(ConfigError, match='option "Strict" specified for memoryReservationPolicy. Valid options '
                                          'are "None" or "TieredReservation"'):
        load_kubelet_config({"memoryReservationPolicy": "Strict"})
    assert memory_protection("None", tmp_path) is None and not caplog.text
    assert memory_protection("TieredReservation", tmp_path) is None
    assert "memory.min and memory.low exist on cgroup v2 only" in caplog.text
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    assert memory_protection("TieredReservation", tmp_path) == TIERED
    assert memory_protection("None", tmp_path) == RESET


def _v2_syncer(syncer, node, tmp_path, protection):
    root = tmp_path / "cgroup2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    syncer.node = dataclasses.replace(node, cgroup_root=root, memory_protection=protection)
    return root


async def _admit(syncer, store, p):
    with store.session() as s:
        s.add(DesiredPod(uid=p.uid, namespace="default", name=p.uid, source="file", manifest=p.to_manifest()))
    await syncer.sync(p.uid)


async def test_the_syncer_protects_containers_pods_and_tiers_and_follows_the_pods(syncer, rt, store, node, tmp_path):
    """TieredReservation on cgroup v2: the container through the CRI, the pod cgroup, and the
    tiers above them as the pods come and go, with the kubelet's gauges beside."""
    from services.pod_sync import metrics as M

    root = _v2_syncer(syncer, node, tmp_path, TIERED)
    g = pod({"limits": {"memory": "64Mi", "cpu": "100m"}})
    b = validate_pod({"metadata": {"name": "b", "uid": "uid2"}, "spec": {"containers": [
        {"name": "c0", "image": IMG, "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "256Mi"}}}]}})
    for p in (g, b):
        await _admit(syncer, store, p)
    unified = {c.metadata.name + "/" + c.labels["io.kubernetes.pod.uid"]: dict(c.linux.resources.unified)
               for c in rt.created_configs.values()}
    assert unified["c0/uid1"]["memory.min"] == str(64 * MI) and "memory.low" not in unified["c0/uid1"]
    assert unified["c0/uid2"]["memory.low"] == str(32 * MI) and "memory.min" not in unified["c0/uid2"]
    assert (root / "kubepods/poduid1/memory.min").read_text() == str(64 * MI)
    assert (root / "kubepods/burstable/poduid2/memory.low").read_text() == str(32 * MI)
    assert (root / "kubepods/memory.min").read_text() == str(96 * MI), "the tiers cover both classes"
    assert (root / "kubepods/memory.low").read_text() == str(32 * MI)
    assert (root / "kubepods/burstable/memory.low").read_text() == str(32 * MI)
    assert (M.MEMORY_QOS_MIN_BYTES._value.get(), M.MEMORY_QOS_LOW_BYTES._value.get()) == (64 * MI, 32 * MI)
    with store.session() as s:
        s.get(DesiredPod, "uid2").deleting = True
    await syncer.sync("uid2")
    assert (root / "kubepods/memory.min").read_text() == str(64 * MI)
    assert (root / "kubepods/memory.low").read_text() == "0"
    assert (root / "kubepods/burstable/memory.low").read_text() == "0", "its last pod gone, nothing kept"


async def test_under_none_the_tiers_protection_a_former_run_left_is_reset_once(syncer, store, node, tmp_path):
    root = _v2_syncer(syncer, node, tmp_path, RESET)
    for d, f in (("kubepods", "memory.min"), ("kubepods", "memory.low"), ("kubepods/burstable", "memory.low")):
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / f).write_text(str(MI))
    await syncer.update_qos_tiers()  # pod-sync's start
    assert [(root / d / f).read_text() for d, f in (("kubepods", "memory.min"), ("kubepods", "memory.low"),
                                                    ("kubepods/burstable", "memory.low"))] == ["0", "0", "0"]
    (root / "kubepods/memory.min").write_text("7")
    await _admit(syncer, store, pod({"limits": {"memory": "64Mi", "cpu": "100m"}}))
    assert (root / "kubepods/memory.min").read_text() == "7", "after the start, None leaves the files alone"
    assert (root / "kubepods/poduid1/memory.min").exists() is False


def test_with_the_systemd_driver_the_tiers_protection_is_a_property_of_their_slices(tmp_path):
    from services.pod_sync.fake_systemd import FakeSystemdBus
    from services.pod_sync.pod_cgroup import set_qos_tiers
    from services.pod_sync.systemd_slices import SystemdSlices, properties

    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    bus = FakeSystemdBus(tmp_path)
    bus.units["kubepods.slice"] = {}
    b = pod({"requests": {"memory": "32Mi"}})
    assert set_qos_tiers([b], tmp_path, SystemdSlices(tmp_path, bus), protection=(0, 32 * MI)) == []
    assert bus.units["kubepods.slice"] == {"MemoryMin": 32 * MI, "MemoryLow": 32 * MI}
    assert bus.units["kubepods-burstable.slice"]["MemoryLow"] == 32 * MI
    assert (tmp_path / "kubepods.slice/kubepods-burstable.slice/memory.low").read_text() == str(32 * MI)
    props = dict(properties(PodCgroupConfig(2, None, None, memory_min=64 * MI), 100_000, 1))
    assert props["MemoryMin"] == ("t", 64 * MI) and "MemoryLow" not in props


@pytest.mark.parametrize("v2,single,group", [
    (True, None, True), (True, False, True), (True, True, False),  # the kubelet's default on v2: the group
    (False, None, False), (False, True, False),                     # v1: no such file, one process
])
def test_containers_get_memory_oom_group_on_cgroup_v2_unless_single_process_oom_kill(tmp_path, v2, single, group):
    if v2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    assert oom_group(single, tmp_path) is group
    p = pod({"limits": {"memory": "64Mi"}})
    node = NodeFacts("n", "10.0.0.1", 2000, 4 * 1024 * MI, None, tmp_path, oom_group=oom_group(single, tmp_path))
    unified = linux_resources(p, p.spec.containers[0], qos_class(p), node).unified
    assert dict(unified) == ({"memory.oom.group": "1"} if group else {})
