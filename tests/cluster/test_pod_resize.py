"""In-place pod resize through the API server's `resize` subresource: the node grants it, the
running container's cgroup changes without a restart (or with one, where resizePolicy asks),
and the pod's status says what was allocated and what the container has. The cluster node's
cpuCFSQuotaPeriod is 50 ms: every CPU limit is a quota of that period, in the container and in
the pod cgroup, before and after a resize."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cluster.conftest import CFS_PERIOD_US


def _resources(cpu_req: str, cpu_lim: str, mem_req: str, mem_lim: str) -> dict:
    return {"requests": {"cpu": cpu_req, "memory": mem_req}, "limits": {"cpu": cpu_lim, "memory": mem_lim}}


def _resize(cluster, name: str, resources: dict) -> None:
    cluster.kubectl("patch", "pod", name, "--subresource", "resize", "-p",
                    json.dumps({"spec": {"containers": [{"name": "app", "resources": resources}]}}))


def _settled(resources: dict, kind: str = "containerStatuses"):
    """The (first) container reports these resources, and no resize is pending or in progress."""
    def check(p: dict) -> bool:
        status = p.get("status", {})
        statuses = status.get(kind) or [{}]
        types = {c["type"] for c in status.get("conditions", [])}
        return (statuses[0].get("resources") == resources and "running" in statuses[0].get("state", {})
                and not types & {"PodResizePending", "PodResizeInProgress"}
                and status.get("observedGeneration") == p["metadata"]["generation"])
    return check


def _cgroup(cluster, name: str, container: str = "app") -> dict[str, str]:
    """The container's own CPU and memory cgroup settings, read inside it (v1 or v2)."""
    script = ("if [ -f /sys/fs/cgroup/cpu.max ]; then cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu.weight "
              "/sys/fs/cgroup/memory.max; else echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us "
              "/sys/fs/cgroup/cpu/cpu.cfs_period_us); cat /sys/fs/cgroup/cpu/cpu.shares "
              "/sys/fs/cgroup/memory/memory.limit_in_bytes; fi")
    cpu, shares, memory = cluster.kubectl("exec", name, "-c", container, "--", "sh", "-c", script).stdout.split("\n")[:3]
    quota, period = cpu.split()
    assert int(period) == CFS_PERIOD_US, f"the container's CFS period is cpuCFSQuotaPeriod's: {cpu}"
    return {"quota": quota, "shares": shares, "memory": memory}


def _pod_cgroup(pod: dict, controller: str, name: str) -> str:
    """The pod's own cgroup setting, read on the node (cgroup v1, as on these machines)."""
    tier = {"Guaranteed": "", "Burstable": "burstable/"}[pod["status"]["qosClass"]]
    return (Path("/sys/fs/cgroup") / controller / f"kubepods/{tier}pod{pod['metadata']['uid']}" / name).read_text().strip()


def test_resize_cpu_in_place_then_memory_with_a_restart(cluster):
    cluster.create_pod("resized", {"containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"],
        "resources": _resources("100m", "200m", "64Mi", "128Mi"),
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                         {"resourceName": "memory", "restartPolicy": "RestartContainer"}]}]})
    first = _resources("100m", "200m", "64Mi", "128Mi")
    pod = cluster.wait_pod("resized", _settled(first), 60, "Running")
    assert pod["status"]["containerStatuses"][0]["allocatedResources"] == {"cpu": "100m", "memory": "64Mi"}
    before = _cgroup(cluster, "resized")
    assert before["quota"] == "10000" and before["memory"] in (str(128 * 2**20),)

    cpu = _resources("300m", "400m", "64Mi", "128Mi")
    _resize(cluster, "resized", cpu)
    pod = cluster.wait_pod("resized", _settled(cpu), 60, "the cpu resize done")
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 0, "cpu is NotRequired: no restart"
    assert status["allocatedResources"] == {"cpu": "300m", "memory": "64Mi"}
    assert pod["metadata"]["generation"] == 2
    now = _cgroup(cluster, "resized")
    assert now["quota"] == "20000", now
    assert now["shares"] in ("307", "12"), now  # cpu.shares on v1, cpu.weight on v2
    # The pod cgroup grew first (cgroup v1 refuses a container's quota above its pod's).
    assert _pod_cgroup(pod, "cpu", "cpu.cfs_quota_us") == "20000"
    assert _pod_cgroup(pod, "cpu", "cpu.cfs_period_us") == str(CFS_PERIOD_US)
    assert _pod_cgroup(pod, "cpu", "cpu.shares") == "307"

    memory = _resources("300m", "400m", "64Mi", "256Mi")
    _resize(cluster, "resized", memory)
    pod = cluster.wait_pod("resized", lambda p: _settled(memory)(p)
                           and p["status"]["containerStatuses"][0]["restartCount"] == 1, 90,
                           "restarted with the new memory limit")
    assert _cgroup(cluster, "resized")["memory"] == str(256 * 2**20)
    assert _pod_cgroup(pod, "memory", "memory.limit_in_bytes") == str(256 * 2**20)
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=resized").stdout
    assert "ResizeStarted" in events and "ResizeCompleted" in events
    assert "Container app resize requires restart" in events
    cluster.kubectl("delete", "pod", "resized", "--wait=false")


def test_resize_that_does_not_fit_beside_other_pods_waits_for_room(cluster):
    # The API server refuses a resize beyond the node's allocatable; one that fits the node but
    # not beside the pods already there is the node's to defer, until they go.
    asked = _resources("50m", "100m", "32Mi", "64Mi")
    cluster.create_pod("waiting", {"containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                                   "command": ["sleep", "3600"], "resources": asked}]})
    cluster.create_pod("room-taker", {"containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"],
        "resources": {"requests": {"cpu": "1500m"}}}]})
    cluster.wait_pod("waiting", _settled(asked), 60, "Running")
    cluster.wait_pod("room-taker", lambda p: p.get("status", {}).get("phase") == "Running", 60, "Running")
    bigger = _resources("1", "1", "32Mi", "64Mi")
    _resize(cluster, "waiting", bigger)

    def deferred(p: dict) -> bool:
        conds = {c["type"]: c for c in p.get("status", {}).get("conditions", [])}
        return conds.get("PodResizePending", {}).get("reason") == "Deferred"
    pod = cluster.wait_pod("waiting", deferred, 60, "PodResizePending Deferred")
    pending = next(c for c in pod["status"]["conditions"] if c["type"] == "PodResizePending")
    assert pending["message"].startswith("Node didn't have enough resource: cpu, requested: 1000, used: ")
    assert pending["observedGeneration"] == 2
    status = pod["status"]["containerStatuses"][0]
    assert status["allocatedResources"]["cpu"] == "50m" and status["resources"] == asked
    assert "running" in status["state"] and status["restartCount"] == 0
    assert _cgroup(cluster, "waiting")["quota"] == "5000", "the container keeps its resources meanwhile"
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=waiting").stdout
    assert "ResizeDeferred" in events

    cluster.kubectl("delete", "pod", "room-taker", "--wait=false")
    cluster.wait_pod("waiting", _settled(bigger), 90, "resized once the room is free")
    assert _cgroup(cluster, "waiting")["quota"] == "50000", "1 CPU: a whole period"
    cluster.kubectl("delete", "pod", "waiting", "--wait=false")


def test_resize_pod_level_resources_in_place_and_below_usage(cluster):
    """The node declares InPlacePodLevelResourcesVerticalScaling, so the API server takes a resize
    of spec.resources. The pod cgroup and the container without limits of its own (it takes the
    pod's) change in place, and the pod's status.resources follows; a memory limit below what the
    pod uses fails with an Error and changes nothing, until it is asked back."""
    assert cluster.node_obj()["status"]["declaredFeatures"] == [
        "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers",
        "RestartAllContainersOnContainerExits"]
    pod_level = {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "400m", "memory": "128Mi"}}
    cluster.create_pod("plr", {"resources": pod_level, "containers": [{
        "name": "app", "image": cluster.node.image("busybox"),
        # about 20 MiB in use (tmpfs pages are charged to the pod), so 10 MiB is below usage
        "command": ["sh", "-c", "head -c 20971520 /dev/zero > /dev/shm/fill; sleep 3600"]}]})

    def settled(limits: dict):
        def check(p: dict) -> bool:
            status = p.get("status", {})
            types = {c["type"] for c in status.get("conditions", [])}
            return (status.get("resources", {}).get("limits") == limits and status.get("phase") == "Running"
                    and not types & {"PodResizePending", "PodResizeInProgress"}
                    and status.get("observedGeneration") == p["metadata"]["generation"])
        return check

    pod = cluster.wait_pod("plr", settled({"cpu": "400m", "memory": "128Mi"}), 60, "Running")
    assert pod["status"]["allocatedResources"] == {"cpu": "200m", "memory": "64Mi"}
    assert pod["status"]["resources"]["requests"] == {"cpu": "200m", "memory": "64Mi"}
    assert pod["status"]["containerStatuses"][0]["resources"] == {}, "the container sets none itself"
    assert _cgroup(cluster, "plr")["quota"] == str(400 * CFS_PERIOD_US // 1000)

    cluster.kubectl("patch", "pod", "plr", "--subresource", "resize", "-p", json.dumps(
        {"spec": {"resources": {"limits": {"cpu": "600m", "memory": "128Mi"}}}}))
    pod = cluster.wait_pod("plr", settled({"cpu": "600m", "memory": "128Mi"}), 60, "the pod-level resize done")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert _pod_cgroup(pod, "cpu", "cpu.cfs_quota_us") == str(600 * CFS_PERIOD_US // 1000)
    assert _cgroup(cluster, "plr")["quota"] == str(600 * CFS_PERIOD_US // 1000), "the container took the pod's limit"

    small = {"requests": {"cpu": "200m", "memory": "10Mi"}, "limits": {"cpu": "600m", "memory": "10Mi"}}
    cluster.kubectl("patch", "pod", "plr", "--subresource", "resize", "-p", json.dumps({"spec": {"resources": small}}))

    def failed(p: dict) -> bool:
        return any(c["type"] == "PodResizeInProgress" and c.get("reason") == "Error"
                   for c in p.get("status", {}).get("conditions", []))
    pod = cluster.wait_pod("plr", failed, 60, "the resize below usage to fail")
    [progress] = [c for c in pod["status"]["conditions"] if c["type"] == "PodResizeInProgress"]
    assert "attempting to set pod memory limit (10485760) below current usage" in progress["message"], progress
    assert pod["status"]["resources"]["limits"]["memory"] == "128Mi", "nothing changed"
    assert _pod_cgroup(pod, "memory", "memory.limit_in_bytes") == str(128 * 2**20)

    cluster.kubectl("patch", "pod", "plr", "--subresource", "resize", "-p", json.dumps({"spec": {"resources": pod_level}}))
    pod = cluster.wait_pod("plr", settled({"cpu": "400m", "memory": "128Mi"}), 60, "the resize back")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0


def test_resize_a_running_init_container_that_is_not_a_sidecar(cluster):
    """The node declares InPlacePodVerticalScalingInitContainers: the API server takes the resize,
    and the running init container's cgroup changes in place."""
    cluster.create_pod("initresize", {"initContainers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"],
        "resources": _resources("100m", "200m", "64Mi", "128Mi")}],
        "containers": [{"name": "main", "image": cluster.node.image("busybox"), "command": ["sleep", "3600"]}]})

    def init_settled(resources: dict):
        return _settled(resources, "initContainerStatuses")

    cluster.wait_pod("initresize", init_settled(_resources("100m", "200m", "64Mi", "128Mi")), 60, "the init container running")
    bigger = _resources("200m", "300m", "64Mi", "128Mi")
    cluster.kubectl("patch", "pod", "initresize", "--subresource", "resize", "-p",
                    json.dumps({"spec": {"initContainers": [{"name": "app", "resources": bigger}]}}))
    pod = cluster.wait_pod("initresize", init_settled(bigger), 60, "the init container resized")
    assert pod["status"]["initContainerStatuses"][0]["restartCount"] == 0
    assert _cgroup(cluster, "initresize")["quota"] == str(300 * CFS_PERIOD_US // 1000)
