"""A Deployment over three pykubelet nodes, one of them lost and brought back, another drained:
what the scheduler and the controller-manager see of pykubelet. The times are printed."""

from __future__ import annotations

import json
import os
import signal
import time

from shared.process.admin import SERVICES
from tests.integration.conftest import relaunch_node, wait_for
from tests.multinode.conftest import REGISTRY_PORT

REPLICAS = 30
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def deployment() -> dict:
    evict_soon = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
                  for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                         "terminationGracePeriodSeconds": 2, "tolerations": evict_soon,
                         "containers": [{"name": "web", "image": f"127.0.0.1:{REGISTRY_PORT}/pykubelet/web:1.0",
                                         "readinessProbe": {"httpGet": {"path": "/", "port": 80},
                                                            "periodSeconds": 2}}]}}}}


def pods(cluster) -> list[dict]:
    return cluster.get("pods", "-l", "app=web")["items"]


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def serving(cluster, nodes: set[str]) -> list[dict]:
    """Ready pods, not being deleted, on these nodes."""
    return [p for p in pods(cluster) if ready(p) and "deletionTimestamp" not in p["metadata"]
            and p["spec"].get("nodeName") in nodes]


def available(cluster) -> bool:
    status = cluster.get("deployment", "web")["status"]
    conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
    return status.get("availableReplicas", 0) == REPLICAS and conds.get("Available") == "True"


def by_node(cluster) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in pods(cluster):
        if "deletionTimestamp" not in p["metadata"]:
            counts[p["spec"].get("nodeName", "")] = counts.get(p["spec"].get("nodeName", ""), 0) + 1
    return counts


def test_a_deployment_survives_a_lost_node_and_a_drain(cluster):
    times: dict[str, float] = {}
    everyone = set(cluster.nodes)
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(deployment()))
    wait_for(lambda: available(cluster), 300, f"{REPLICAS} replicas Available")
    times["Deployment Available on 3 nodes"] = time.monotonic() - t0
    spread = by_node(cluster)
    assert set(spread) == everyone and min(spread.values()) >= 5, f"spread over the three nodes: {spread}"

    # The ServiceAccount admission and the token controller: every pod has the default token.
    for p in pods(cluster):
        mounts = p["spec"]["containers"][0].get("volumeMounts", [])
        assert any(m["mountPath"] == os.path.dirname(TOKEN) for m in mounts), p["metadata"]["name"]
    for name, node in cluster.nodes.items():
        uid = next(p["metadata"]["uid"] for p in pods(cluster) if p["spec"]["nodeName"] == name)
        code, out = node.exec(uid, "web", ["cat", TOKEN])
        assert code == 0 and out.startswith("eyJ"), f"{name}: the token is not mounted: {out[:200]}"

    # node-3's pykubelet is killed (its pods keep running on it): the controller-manager marks
    # the node unreachable, evicts its pods, and the Deployment is whole again on the others.
    lost, survivors = "node-3", everyone - {"node-3"}
    node = cluster.nodes[lost]
    on_lost = {p["metadata"]["name"] for p in pods(cluster) if p["spec"]["nodeName"] == lost}
    t0 = time.monotonic()
    node.proc.send_signal(signal.SIGKILL)
    node.proc.wait(timeout=10)
    for service in SERVICES:
        os.kill(node.service_pid(service), signal.SIGKILL)
    wait_for(lambda: cluster.condition(lost) == "Unknown", 120, f"{lost} NotReady (Unknown)")
    times["node lost: NotReady (Unknown) seen"] = time.monotonic() - t0
    taints = {t["key"] for t in cluster.get("node", lost)["spec"].get("taints", [])}
    assert "node.kubernetes.io/unreachable" in taints, taints
    wait_for(lambda: len(serving(cluster, survivors)) == REPLICAS, 240, "replacements Ready on the other nodes")
    times["node lost: pods rescheduled and Ready"] = time.monotonic() - t0
    wait_for(lambda: available(cluster), 60, "the Deployment Available again")
    times["node lost: Deployment Available again"] = time.monotonic() - t0

    # Back: Ready again, and the pods the controller deleted meanwhile are removed from it.
    t0 = time.monotonic()
    relaunch_node(node)
    wait_for(lambda: cluster.condition(lost) == "True", 120, f"{lost} Ready again")
    times["node back: Ready"] = time.monotonic() - t0
    wait_for(lambda: not on_lost & {p["metadata"]["name"] for p in pods(cluster)}, 120,
             "the evicted pods gone from the API")
    wait_for(lambda: not [c for c in node.runtime(lambda cri: cri.list_containers({"io.kubernetes.pod.namespace":
                                                                                      "default"}))
                          if c.state == 1], 120, f"their containers gone from {lost}")
    times["node back: evicted pods removed from it"] = time.monotonic() - t0

    # kubectl drain: the eviction API, and the pods go elsewhere.
    drained = "node-2"
    t0 = time.monotonic()
    cluster.kubectl("drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s",
                    timeout=240)
    wait_for(lambda: len(serving(cluster, everyone - {drained})) == REPLICAS and available(cluster), 180,
             "the drained node's pods Ready elsewhere")
    times["drain: pods rescheduled and Available"] = time.monotonic() - t0
    assert drained not in by_node(cluster)
    events = cluster.get("events", "--field-selector", "reason=Killing")["items"]
    assert any(e["source"].get("host") == drained for e in events), "the drained node stopped its pods"

    print("\n" + "\n".join(f"{what:<45} {secs:6.1f}s" for what, secs in times.items()))
    cluster.kubectl("delete", "deployment", "web", "--wait=false")
    wait_for(lambda: not pods(cluster), 180, "the Deployment's pods gone")
