"""memory.high from memoryThrottlingFactor (services/pod_sync/memory_qos.py), with the kubelet
1.37's formula and rounding, and where it goes: the container's CRI resources, the pod cgroup."""

import pytest

from services.pod_sync.memory_qos import MemoryThrottling, container_memory_high, memory_throttling, pod_memory_high
from services.pod_sync.pod_cgroup import PodCgroupConfig, ensure
from services.pod_sync.runtime_config import NodeFacts, linux_resources
from shared.config.settings import ConfigError, load_kubelet_config
from shared.model.podspec import validate_pod
from shared.model.qos import qos_class
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
