"""Runs after test_zz_node_stop.py stopped the node: the same node started again as one whose
Node object an operator makes (registerNode false), with tight API budgets (kubeAPIQPS and
kubeAPIBurst for every request, eventRecordQPS and eventBurst for events) and one image listed
in its status (nodeStatusMaxImages)."""

from __future__ import annotations

import json
from datetime import datetime

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import NODE_NAME, relaunch_node, wait_for

EVENT_QPS, API_QPS = 1, 2
SETTINGS = (f"registerNode: false\neventRecordQPS: {EVENT_QPS}\neventBurst: 1\n"
            f"kubeAPIQPS: {API_QPS}\nkubeAPIBurst: 1\nnodeStatusMaxImages: 1\n")
CONTAINERS = 3  # each is Created and Started: 6 events at once, and the image's Pulled


def created(event: dict) -> datetime:
    return datetime.fromisoformat(event["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


def test_a_node_that_does_not_register_waits_for_its_node_object_and_keeps_to_its_budgets(cluster):
    n = cluster.node
    assert n.proc.poll() is not None, "runs once test_zz_node_stop.py has stopped the node"
    cluster.kubectl("delete", "node", NODE_NAME)
    config = n.root / "kubelet-config.yaml"
    config.write_text(config.read_text() + SETTINGS)
    relaunch_node(n)

    # registerNode false: no Node is made; the node says it waits for one, and what to do.
    log = n.root / "logs" / "status-reporter.log"
    waiting = (f"registering node {NODE_NAME} failed: 404 NotFound: Node {NODE_NAME} does not exist and registerNode "
               "is false: create it, or set registerNode to true")
    wait_for(lambda: log.read_text().count(waiting) >= 2, 60, "the node to look for its Node twice")
    assert cluster.kubectl("get", "node", NODE_NAME, check=False).returncode != 0, "the node registered itself"
    cluster.kubectl("create", "-f", "-", input_text=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE_NAME}}))
    wait_for(lambda: cluster.ready() == "True", 90, "the node to report its status on the Node made for it")
    # nodeStatusMaxImages 1: only the largest of the node's images is listed.
    present = n.runtime(lambda cri: cri.list_images())
    [listed] = wait_for(lambda: cluster.node_obj()["status"].get("images"), 30, "the Node's status.images")
    assert len(present) > 1 and listed["sizeBytes"] == max(i.size for i in present), (listed, len(present))

    # eventRecordQPS 1, eventBurst 1: the pod's container events (each container Created and
    # Started, the image Pulled), made within a second or two, reach the API server about a
    # second apart (the kubelet's default, 50 a second, sends them as they come).
    busybox = n.image("busybox")
    cluster.create_pod("chatty-events", {"containers": [
        {"name": f"c{i}", "image": busybox, "command": ["sleep", "3600"]} for i in range(CONTAINERS)]})
    try:
        def pod_events() -> list[dict]:
            return cluster.get("events", "--field-selector", "involvedObject.name=chatty-events")["items"]

        def all_started(events: list[dict]) -> bool:
            return sum(e["reason"] in ("Created", "Started") for e in events) >= 2 * CONTAINERS
        events = wait_for(lambda: (e := pod_events()) and all_started(e) and e, 90,
                          f"each of the {CONTAINERS} containers' Created and Started events")
        times = sorted(created(e) for e in events)
        span = (times[-1] - times[0]).total_seconds()
        assert span >= (len(times) - 1) / EVENT_QPS - 2, \
            f"{len(times)} events within {span:.0f}s: {[(e['reason'], e['metadata']['creationTimestamp']) for e in events]}"
    finally:
        cluster.kubectl("delete", "pod", "chatty-events", "--wait=false")

    # kubeAPIQPS 2, kubeAPIBurst 1: what the node's services asked of the API server at once
    # (at start, for the pod) waited for the budget, in client-go's metric as the kubelet
    # exports it. With the kubelet's default budget (50 a second, 100 at once) nothing waits.
    metrics = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/metrics").stdout
    waited = sum(s.value for f in text_string_to_metric_families(metrics)
                 if f.name == "rest_client_rate_limiter_duration_seconds"
                 for s in f.samples if s.name.endswith("_sum"))
    assert waited >= 1.0, f"requests waited {waited:.2f}s in all for the API budget"
