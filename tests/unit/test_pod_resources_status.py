"""The pod-level status.allocatedResources and status.resources, as the kubelet 1.37 reports them
for every pod."""

from services.pod_sync.pod_cgroup import PodCgroupConfig, pod_cgroup_config
from services.pod_sync.pod_resources_status import pod_resources
from shared.model.podspec import validate_pod
from shared.model.quantity import format_binary, format_millicores
from tests.unit.conftest import IMG


def pod(*containers, resources=None):
    spec = {"containers": [{"name": f"c{i}", "image": IMG, **({"resources": r} if r else {})}
                           for i, r in enumerate(containers)]}
    if resources:
        spec["resources"] = resources
    return validate_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": spec})


def test_quantities_are_written_as_the_api_server_writes_them():
    assert [format_millicores(m) for m in (2000, 250, 1500)] == ["2", "250m", "1500m"]
    assert [format_binary(b) for b in (128 * 2**20, 2**30, 1536, 0)] == ["128Mi", "1Gi", "1536", "0"]


def test_a_burstable_pod_reports_its_containers_together_and_its_cgroup():
    p = pod({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
            {"requests": {"cpu": "150m", "memory": "32Mi"}})
    assert pod_resources(p, pod_cgroup_config(p)) == {
        "allocatedResources": {"cpu": "250m", "memory": "96Mi"},
        # no CPU quota or memory limit on the pod cgroup: not every container has one
        "resources": {"requests": {"cpu": "250m", "memory": "96Mi"}}}


def test_a_best_effort_pod_reports_empty_resources_and_no_allocation():
    p = pod(None)
    assert pod_resources(p, pod_cgroup_config(p)) == {"resources": {}}


def test_pod_level_resources_are_reported_as_the_cgroup_has_them():
    p = pod(None, resources={"requests": {"cpu": "200m", "memory": "128Mi"},
                             "limits": {"cpu": "400m", "memory": "256Mi"}})
    assert pod_resources(p, pod_cgroup_config(p)) == {
        "allocatedResources": {"cpu": "200m", "memory": "128Mi"},
        "resources": {"requests": {"cpu": "200m", "memory": "128Mi"},
                      "limits": {"cpu": "400m", "memory": "256Mi"}}}
    # a resize that stopped halfway: the cgroup still has the old memory limit
    halfway = PodCgroupConfig(cpu_shares=204, cpu_quota=40_000, memory_limit=512 * 2**20)
    assert pod_resources(p, halfway)["resources"]["limits"] == {"cpu": "400m", "memory": "512Mi"}


def test_the_node_declares_the_resize_of_pod_level_resources(tmp_path):
    """Without it the API server refuses such a resize for a pod on this node."""
    from services.status_reporter.node_object import node_status_facts
    facts = node_status_facts("n1", str(tmp_path), 110, "containerd://2.4.2", 10250, "10.0.0.1")
    assert facts["declaredFeatures"] == [
        "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers",
        "RestartAllContainersOnContainerExits"]


def test_a_pod_level_request_is_reported_as_written():
    """The upstream spec "pod-level resize with no container requests and limits" asks 10m of
    memory: the kubelet copies the quantity, bytes would round it up to 1."""
    p = pod(None, resources={"requests": {"cpu": "4m", "memory": "10m"}})
    assert pod_resources(p, pod_cgroup_config(p))["allocatedResources"] == {"cpu": "4m", "memory": "10m"}
