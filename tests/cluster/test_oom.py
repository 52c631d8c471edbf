"""OOM kills as the kubelet 1.37 reports them: a process killed at its container's memory limit
counts in that container's container_oom_events_total (/metrics/cadvisor), the container living
on; a node-wide OOM kill is the Node's SystemOOM event."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.test_node_api import raw
from tests.integration.conftest import wait_for

# What the kernel logs for a node-wide OOM kill, written to its log by this test (root may write
# /dev/kmsg): a real one would take the machine's memory.
GLOBAL_OOM = ("oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
              "task_memcg=/,task=pykubelet-e2e,pid=4242,uid=0\n")


def _oom_events(cluster, pod: str, container: str) -> float | None:
    for family in text_string_to_metric_families(raw(cluster, "/metrics/cadvisor")):
        if family.name == "container_oom_events":
            for s in family.samples:
                if s.labels.get("pod") == pod and s.labels.get("container") == container:
                    return s.value
    return None


def test_a_process_killed_at_its_containers_limit_counts_in_that_containers_oom_events(cluster):
    # The inner shell doubles a string until the container's 32Mi are gone; the kernel kills it,
    # the biggest process, and the outer shell goes on. The other container's limit keeps the
    # pod's cgroup (limited to the sum) out of it: its limit is not the one reached.
    busybox = cluster.node.image("busybox")
    cluster.create_pod("oomer", {"containers": [
        {"name": "main", "image": busybox, "resources": {"limits": {"memory": "32Mi"}},
         "command": ["sh", "-c", "sh -c 'a=x; while :; do a=$a$a; done'; echo survived; sleep 3600"]},
        {"name": "idle", "image": busybox, "resources": {"limits": {"memory": "64Mi"}},
         "command": ["sleep", "3600"]}]})
    cluster.wait_pod("oomer", lambda p: p.get("status", {}).get("phase") == "Running", 60, "the pod running")
    wait_for(lambda: "survived" in cluster.kubectl("logs", "oomer", "-c", "main").stdout, 60,
             "the hog killed, its parent alive")
    count = wait_for(lambda: _oom_events(cluster, "oomer", "main"), 30, "the container's OOM count")
    assert count == 1
    assert _oom_events(cluster, "oomer", "idle") == 0
    assert _oom_events(cluster, "oomer", "") == 0, "the pod's cgroup"
    assert cluster.pod("oomer")["status"]["containerStatuses"][0]["restartCount"] == 0
    cluster.kubectl("delete", "pod", "oomer", "--wait=false")


def test_a_node_wide_oom_kill_is_the_nodes_system_oom_event(cluster):
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(GLOBAL_OOM)

    def system_ooms() -> list[str]:
        events = cluster.get("events", "--field-selector", "involvedObject.kind=Node,reason=SystemOOM")["items"]
        return [e["message"] for e in events if e["type"] == "Warning"]

    messages = wait_for(system_ooms, 30, "the SystemOOM event")
    assert "System OOM encountered, victim process: pykubelet-e2e, pid: 4242" in messages
