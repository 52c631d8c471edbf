"""A node-monitoring DaemonSet (the node-exporter pattern) on three pykubelet nodes: the
DaemonSet controller puts one pod on each node; each pod, in its node's network and the host's
PID namespace, reads the host's /proc and serves metrics on the node's address, scraped there
from outside as Prometheus would."""

from __future__ import annotations

import json

import httpx

from tests.integration.conftest import wait_for

PORT = 9101
# Refreshes a metrics file from the host's /proc every second; busybox httpd serves it.
EXPORTER = ("mkdir -p /www; while true; do { "
            "echo \"node_processes $(ls -d /proc/[0-9]* | wc -l)\"; "
            "echo \"node_pykubelet_processes $(grep -l pykubelet /proc/[0-9]*/cmdline 2>/dev/null | wc -l)\"; "
            "echo \"node_load1 $(cut -d ' ' -f1 /proc/loadavg)\"; "
            "} > /www/.metrics && mv /www/.metrics /www/metrics; sleep 1; done & "
            f"exec httpd -f -p {PORT} -h /www")


def daemonset(image: str) -> dict:
    labels = {"app": "node-monitor"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-monitor", "namespace": "default"},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "hostNetwork": True, "hostPID": True, "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "exporter", "image": image, "command": ["sh", "-c", EXPORTER],
                                "ports": [{"containerPort": PORT, "hostPort": PORT}],
                                "readinessProbe": {"httpGet": {"path": "/metrics", "port": PORT},
                                                   "periodSeconds": 2}}]}}}}


def metrics(address: str) -> dict[str, float]:
    text = httpx.get(f"http://{address}:{PORT}/metrics", timeout=5).text
    return {name: float(value) for name, value in (line.split() for line in text.splitlines() if line.strip())}


def test_a_monitoring_daemonset_runs_on_every_node_and_serves_the_hosts_metrics(cluster):
    image = next(iter(cluster.nodes.values())).image("busybox")
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(daemonset(image)))
    try:
        def rolled_out() -> bool:
            status = cluster.get("daemonset", "node-monitor").get("status", {})
            return status.get("desiredNumberScheduled") == len(cluster.nodes) == status.get("numberReady")
        wait_for(rolled_out, 120, "the DaemonSet's pod ready on every node")
        pods = cluster.get("pods", "-l", "app=node-monitor")["items"]
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(cluster.nodes)
        for pod in pods:
            node = pod["spec"]["nodeName"]
            address = cluster.networks[node].address
            assert pod["status"]["podIP"] == pod["status"]["hostIP"] == address, pod["status"]
            seen = metrics(address)
            # The host's processes, the nodes' pykubelet services among them: not the pod's own two.
            assert seen["node_processes"] > 20 and seen["node_pykubelet_processes"] >= 1, (node, seen)
    finally:
        cluster.kubectl("delete", "daemonset", "node-monitor", "--wait=true", timeout=90)
        wait_for(lambda: not cluster.get("pods", "-l", "app=node-monitor")["items"], 90, "the monitor pods to go")
