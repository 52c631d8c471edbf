"""pykubelet as a node of a real cluster."""

from __future__ import annotations

import os
import time
from datetime import datetime

from services.node_api import serving_csr
from services.pod_sync import api_source as pod_sync_api
from services.volume import manager as volume_manager
from tests.cluster.conftest import (
    CGROUP_V1_ROOT,
    KUBE_RESERVED_CGROUP,
    KUBE_RESERVED_MEMORY_MI,
    LEASE_SECONDS,
    MAX_PODS,
    NODE_LABELS,
    PODS_PER_CORE,
    PROVIDER_ID,
    STATUS_REPORT_EVERY,
    STATUS_UPDATE_EVERY,
    SYSTEM_RESERVED_CGROUP,
    SYSTEM_RESERVED_CPU_M,
    TAINT,
)
from tests.cluster.harness import KUBE_VERSION
from tests.integration.conftest import NODE_NAME, wait_for
from tests.integration.slow_registry import distinct_images


def _renew_time(cluster) -> datetime:
    lease = cluster.get("lease", NODE_NAME, "-n", "kube-node-lease")
    return datetime.strptime(lease["spec"]["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ")


def test_node_registers_ready_with_the_kubelets_fields(cluster):
    node = cluster.node_obj()
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == NODE_NAME and labels["kubernetes.io/os"] == "linux"
    assert NODE_LABELS.items() <= labels.items(), labels  # --node-labels
    status = node["status"]
    assert set(status["capacity"]) >= {"cpu", "memory", "pods", "ephemeral-storage"}
    # --max-pods (the kubelet's default: 110), capped by --pods-per-core per CPU
    assert status["capacity"]["pods"] == str(min(MAX_PODS, PODS_PER_CORE * len(os.sched_getaffinity(0))))
    assert status["allocatable"]["pods"] == status["capacity"]["pods"]
    info = status["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://")
    assert info["bootID"] and info["kernelVersion"] and info["osImage"]
    # The same minor as the control plane it joined; kube-proxy's version is no longer reported.
    assert info["kubeletVersion"].startswith("v" + ".".join(KUBE_VERSION.split(".")[:2]) + ".")
    assert not info.get("kubeProxyVersion")
    # --register-with-taints and --provider-id (tests/cluster/conftest.py).
    spec = node["spec"]
    assert spec["providerID"] == PROVIDER_ID and TAINT in spec["taints"], spec
    # --system-reserved: allocatable CPU is capacity less the reservation.
    capacity_m = int(status["capacity"]["cpu"]) * 1000
    assert status["allocatable"]["cpu"] == f"{capacity_m - SYSTEM_RESERVED_CPU_M}m", status["allocatable"]
    # --kube-reserved: allocatable memory is capacity less it and evictionHard's memory.available
    # (the kubelet's default, 100Mi).
    capacity_ki = int(status["capacity"]["memory"].removesuffix("Ki"))
    assert status["allocatable"]["memory"] == f"{capacity_ki - (KUBE_RESERVED_MEMORY_MI + 100) * 1024}Ki", status
    types = {a["type"] for a in status["addresses"]}
    assert types == {"InternalIP", "Hostname"}
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "KubeletReady"
    assert conds["MemoryPressure"]["status"] == "False"
    out = cluster.kubectl("get", "nodes").stdout
    assert NODE_NAME in out and " Ready " in out


def test_system_and_kube_reserved_are_enforced_on_their_cgroups(cluster):
    """--enforce-node-allocatable=pods,system-reserved,kube-reserved with --system-reserved-cgroup
    and --kube-reserved-cgroup, as a seed gives them: the system cgroup gets the cpu.shares of
    --system-reserved's 100m, the kube cgroup the memory limit of --kube-reserved's 64Mi, and
    what neither reserves stays unlimited, as the kubelet sets them."""
    system, kube = (CGROUP_V1_ROOT / c.lstrip("/") for c in (SYSTEM_RESERVED_CGROUP, KUBE_RESERVED_CGROUP))
    assert int((CGROUP_V1_ROOT / "cpu" / system.name / "cpu.shares").read_text()) == SYSTEM_RESERVED_CPU_M * 1024 // 1000
    limit = int((CGROUP_V1_ROOT / "memory" / kube.name / "memory.limit_in_bytes").read_text())
    assert limit == KUBE_RESERVED_MEMORY_MI * 2**20
    unlimited = int((CGROUP_V1_ROOT / "memory" / "memory.limit_in_bytes").read_text())
    assert int((CGROUP_V1_ROOT / "memory" / system.name / "memory.limit_in_bytes").read_text()) == unlimited
    assert int((CGROUP_V1_ROOT / "cpu" / kube.name / "cpu.shares").read_text()) == 1024  # the kernel's default


def test_the_nodes_images_are_in_its_status_within_node_status_update_frequency(cluster):
    """status.images lists the runtime's images as the kubelet does (largest first, digests then
    tags); a newly pulled one shows within nodeStatusUpdateFrequency (2 s here; the kubelet's
    10 s) of its pod running, every time."""
    n = cluster.node
    repos = distinct_images(n.registry, "listed", 3)
    names = [f"listed-{i}" for i in range(len(repos))]
    delays = []
    try:
        for name, repo in zip(names, repos, strict=True):
            ref = f"{n.registry}/{repo}:1.0"
            cluster.create_pod(name, {"containers": [{"name": "app", "image": ref, "command": ["sleep", "3600"]}]})
            cluster.wait_pod(name, lambda p: p.get("status", {}).get("phase") == "Running", 60)
            running = time.monotonic()
            wait_for(lambda r=ref: any(r in img["names"] for img in cluster.node_obj()["status"].get("images", [])),
                     30, f"{ref} in the Node's status.images", interval=0.1)
            delays.append(round(time.monotonic() - running, 1))
    finally:
        cluster.kubectl("delete", "pod", *names, "--wait=false", "--ignore-not-found")
    assert max(delays) <= STATUS_UPDATE_EVERY + 2, f"seconds from Running to listed: {delays}"
    listed = cluster.node_obj()["status"]["images"]
    assert [i["sizeBytes"] for i in listed] == sorted((i["sizeBytes"] for i in listed), reverse=True)
    present = n.runtime(lambda cri: cri.list_images())
    assert len(listed) == min(50, len(present))  # nodeStatusMaxImages' default
    assert {img["names"][0] for img in listed} <= {name for i in present for name in [*i.repo_digests, *i.repo_tags]}


def test_lease_is_renewed(cluster):
    lease = cluster.get("lease", NODE_NAME, "-n", "kube-node-lease")
    assert lease["spec"]["holderIdentity"] == NODE_NAME
    assert lease["spec"]["leaseDurationSeconds"] == LEASE_SECONDS  # nodeLeaseDurationSeconds
    assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
    first = _renew_time(cluster)
    # Renewed every quarter of the duration, as the kubelet renews it.
    wait_for(lambda: _renew_time(cluster) > first, LEASE_SECONDS / 4 + 5, "the lease to be renewed")


def test_node_status_is_reported_every_node_status_report_frequency(cluster):
    """Nothing changes on the node, yet its status is sent again every nodeStatusReportFrequency
    (the Ready condition's lastHeartbeatTime moves)."""
    def heartbeat() -> str:
        return next(c for c in cluster.node_obj()["status"]["conditions"] if c["type"] == "Ready")["lastHeartbeatTime"]
    first = heartbeat()
    wait_for(lambda: heartbeat() != first, STATUS_REPORT_EVERY + 15, "the node status to be reported again")


def test_pod_bound_to_the_node_runs_with_kubelet_status(cluster):
    cluster.create_pod("web", {"containers": [{"name": "web", "image": cluster.node.image("web")}]})
    pod = cluster.wait_pod("web", lambda p: p.get("status", {}).get("phase") == "Running"
                           and p["status"].get("podIP"), 60, "Running with an IP")
    st = pod["status"]
    [cs] = st["containerStatuses"]
    assert cs["ready"] and cs["started"] and cs["restartCount"] == 0
    assert cs["containerID"].startswith("containerd://") and cs["imageID"]
    assert "running" in cs["state"]
    assert st["qosClass"] == "BestEffort" and st["hostIP"] and st["startTime"]
    assert st["hostIPs"] == [{"ip": st["hostIP"]}]
    conds = {c["type"]: c["status"] for c in st["conditions"]}
    assert conds["Ready"] == "True" and conds["ContainersReady"] == "True"
    import httpx

    assert "Hello from a pykubelet pod" in httpx.get(f"http://{st['podIP']}/", timeout=5).text
    cluster.kubectl("delete", "pod", "web", "--wait=false")


def test_crashing_pod_shows_crash_loop_back_off(cluster):
    cluster.create_pod("crash", {"containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                                 "command": ["sh", "-c", "exit 3"]}]})
    wait_for(lambda: "CrashLoopBackOff" in cluster.kubectl("get", "pod", "crash").stdout, 60,
             "kubectl get pods to show CrashLoopBackOff")
    pod = cluster.pod("crash")
    cs = pod["status"]["containerStatuses"][0]
    assert cs["lastState"]["terminated"]["exitCode"] == 3 and cs["restartCount"] >= 1
    cluster.kubectl("delete", "pod", "crash", "--wait=false")


def test_a_containers_own_restart_rules_override_the_pods_policy(cluster):
    """restartPolicy Never for the pod; the container's rule restarts it on exit code 42 (as the
    e2e spec "should restart container on rule match"), and a sibling whose rule does not match
    stays down: the pod stays Running while one of its containers is on its way back."""
    bb = cluster.node.image("busybox")
    rules = [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]
    cluster.create_pod("rules", {"restartPolicy": "Never", "containers": [
        {"name": "again", "image": bb, "command": ["sh", "-c", "sleep 1; exit 42"], "restartPolicy": "Never",
         "restartPolicyRules": rules},
        {"name": "once", "image": bb, "command": ["sh", "-c", "exit 1"], "restartPolicy": "Never",
         "restartPolicyRules": rules}]})

    def restarted(p):
        statuses = {c["name"]: c for c in p.get("status", {}).get("containerStatuses", [])}
        return statuses.get("again", {}).get("restartCount", 0) >= 1 and "terminated" in statuses["once"]["state"]
    pod = cluster.wait_pod("rules", restarted, 60, "the container whose rule matched to be restarted")
    once = next(c for c in pod["status"]["containerStatuses"] if c["name"] == "once")
    assert once["restartCount"] == 0 and once["state"]["terminated"]["exitCode"] == 1
    assert pod["status"]["phase"] == "Running"
    cluster.kubectl("delete", "pod", "rules", "--wait=false")


def test_a_restart_all_containers_rule_runs_every_container_again(cluster):
    """The e2e spec "should restart all containers on regular container exit": in a Never pod,
    the app container that exits 42 the first time brings the init container, the sidecar and
    the other app container back with it, each once; the pod never fails."""
    bb = cluster.node.image("busybox")
    rules = [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]
    cluster.create_pod("restartall", {"restartPolicy": "Never", "volumes": [{"name": "work", "emptyDir": {}}],
        "initContainers": [{"name": "init", "image": bb, "command": ["true"]},
                           {"name": "sidecar", "image": bb, "command": ["sleep", "3600"], "restartPolicy": "Always"}],
        "containers": [
            {"name": "source", "image": bb, "restartPolicy": "Never", "restartPolicyRules": rules,
             "command": ["sh", "-c", "[ -f /w/done ] && exec sleep 3600; touch /w/done; exit 42"],
             "volumeMounts": [{"name": "work", "mountPath": "/w"}]},
            {"name": "regular", "image": bb, "command": ["sleep", "3600"]}]})

    def all_back(p):
        status = p.get("status", {})
        statuses = status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
        return len(statuses) == 4 and all(c["restartCount"] >= 1 for c in statuses) and all(
            "running" in c["state"] for c in statuses if c["name"] != "init")
    pod = cluster.wait_pod("restartall", all_back, 90, "every container to run again")
    statuses = pod["status"]["initContainerStatuses"] + pod["status"]["containerStatuses"]
    assert {c["name"]: c["restartCount"] for c in statuses} == {"init": 1, "sidecar": 1, "source": 1, "regular": 1}
    assert [c["name"] for c in statuses if not c["lastState"].get("terminated")] == [], "each shows the run before"
    assert pod["status"]["phase"] == "Running"
    [cond] = [c for c in pod["status"]["conditions"] if c["type"] == "AllContainersRestarting"]
    assert cond["status"] == "False"
    cluster.kubectl("delete", "pod", "restartall", "--wait=false")


def test_kubectl_delete_completes_within_the_grace_period(cluster):
    cluster.create_pod("graceful", {"terminationGracePeriodSeconds": 5, "containers": [{
        "name": "app", "image": cluster.node.image("busybox"),
        "command": ["sh", "-c", "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.2; done"]}]})
    pod = cluster.wait_pod("graceful", lambda p: p.get("status", {}).get("phase") == "Running", 60)
    uid = pod["metadata"]["uid"]
    start = time.monotonic()
    cluster.kubectl("delete", "pod", "graceful", "--timeout=60s")  # waits until the object is gone
    took = time.monotonic() - start
    assert took < 5 + 10, f"deletion took {took:.1f}s"
    assert cluster.node.containers_of(uid) == [] and cluster.node.sandboxes_of(uid) == []


def test_static_pod_gets_a_mirror_pod_that_comes_back(cluster):
    node = cluster.node
    node.write_pod("mirrored", {"containers": [{"name": "web", "image": node.image("web")}]})
    name = f"mirrored-{NODE_NAME}"
    pod = cluster.wait_pod(name, lambda p: p.get("status", {}).get("phase") == "Running", 60,
                           "the mirror pod to show Running")
    assert "kubernetes.io/config.mirror" in pod["metadata"]["annotations"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Node"
    first_uid = pod["metadata"]["uid"]
    cluster.kubectl("delete", "pod", name, "--wait=false")
    # Event-driven (pod-sync's watch wakes status-reporter): well before the 60 s resync.
    again = cluster.wait_pod(name, lambda p: p["metadata"]["uid"] != first_uid, 10, "the mirror pod to be recreated")
    static = node.pod("mirrored")
    assert static["containers"][0]["restartCount"] == 0  # deleting the mirror does not touch the pod
    assert again["metadata"]["annotations"]["kubernetes.io/config.mirror"] == static["uid"]
    node.remove("mirrored.yaml")
    wait_for(lambda: cluster.pod(name) is None, 10, "the mirror pod to go with the static pod")


# Longer than the lease and than the longest retry back-off towards the API server (the volume
# service's), with half a minute to spare: every service has given up at least one attempt at
# its cap before the API server comes back.
APISERVER_DOWN = max(LEASE_SECONDS, pod_sync_api.RETRY_MAX, volume_manager.RETRY_MAX, serving_csr.RETRY_CAP) + 30


def test_an_apiserver_outage_past_every_back_off_cap_touches_no_pod(cluster):
    """The API server away for longer than the lease and every back-off cap: pods keep running,
    a static pod written meanwhile starts, and once it is back the node is Ready, renews its
    lease, and reports what happened (the new pod's mirror) without a restart."""
    node = cluster.node
    cluster.create_pod("survivor", {"containers": [{"name": "web", "image": node.image("web")}]})
    pod = cluster.wait_pod("survivor", lambda p: p.get("status", {}).get("phase") == "Running", 60)
    before = {c.id for c in node.containers_of(pod["metadata"]["uid"])}
    cluster.cp.stop_apiserver()
    try:
        node.write_pod("offline", {"containers": [{"name": "web", "image": node.image("web")}]})
        node.wait_running("offline", 60)
        time.sleep(APISERVER_DOWN)
    finally:
        cluster.cp.start_apiserver()
    back = time.monotonic()
    wait_for(lambda: cluster.ready() == "True", 60, "the node to be Ready after the outage")
    first = _renew_time(cluster)
    wait_for(lambda: _renew_time(cluster) > first, 30, "lease renewals to continue")
    ready_in = time.monotonic() - back
    mirror = f"offline-{NODE_NAME}"
    cluster.wait_pod(mirror, lambda p: p.get("status", {}).get("phase") == "Running", 60,
                     "the mirror of the pod started during the outage")
    mirrored_in = time.monotonic() - back
    # The kubelet API too: a serving certificate due for renewal during the outage is renewed
    # soon after (the API server verifies it for logs, exec, ...).
    wait_for(lambda: cluster.kubectl("logs", "survivor", check=False).returncode == 0, 90,
             "kubectl logs to work again")
    api_in = time.monotonic() - back
    after = {c.id for c in node.containers_of(pod["metadata"]["uid"])}
    assert after == before
    assert cluster.pod("survivor")["status"]["containerStatuses"][0]["restartCount"] == 0
    print(f"\napiserver down {APISERVER_DOWN}s: node Ready and lease renewed {ready_in:.1f}s after it came back, "
          f"mirror pod of the static pod written meanwhile after {mirrored_in:.1f}s, kubectl logs after {api_in:.1f}s")
    node.remove("offline.yaml")
    cluster.kubectl("delete", "pod", "survivor", "--wait=false")
    wait_for(lambda: cluster.pod(mirror) is None and cluster.pod("survivor") is None, 60, "both pods gone")


def test_events_are_recorded(cluster):
    cluster.create_pod("eventful", {"containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                                    "command": ["sleep", "3600"]}]})
    cluster.wait_pod("eventful", lambda p: p.get("status", {}).get("phase") == "Running", 60)

    def reasons():
        ev = cluster.get("events", "--field-selector", "involvedObject.name=eventful")["items"]
        return {e["reason"] for e in ev}

    wait_for(lambda: {"Pulled", "Created", "Started"} <= reasons(), 30, "Pulled, Created and Started events")
    node_events = cluster.get("events", "--field-selector", "involvedObject.kind=Node")["items"]
    assert {"Starting", "NodeReady"} <= {e["reason"] for e in node_events}
    cluster.kubectl("delete", "pod", "eventful", "--wait=false")
    wait_for(lambda: "Killing" in reasons(), 30, "a Killing event")
