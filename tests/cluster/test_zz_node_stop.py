"""Runs last: these change the node for good."""

from __future__ import annotations

import time

from tests.cluster.test_node import _renew_time
from tests.integration.conftest import NODE_NAME, stop_node, wait_for


def test_pod_cidr_from_the_node_spec_feeds_the_network(cluster):
    # spec.podCIDR can be set once; a narrower range inside the configured one keeps pods valid.
    cluster.kubectl("patch", "node", NODE_NAME, "-p", '{"spec": {"podCIDR": "10.88.0.0/25"}}')
    wait_for(lambda: cluster.node.admin_get("network", "/network", timeout=5).json()["podCIDR"]
             == "10.88.0.0/25", 30, "the network service to use the Node's podCIDR")
    conf = (cluster.node.root / "cni" / "net.d" / "10-pykubelet.conflist").read_text()
    assert "10.88.0.0/25" in conf


def test_stopped_node_stops_renewing_its_lease(cluster):
    stop_node(cluster.node)
    last = _renew_time(cluster)
    time.sleep(15)  # longer than the 10 s renewal period
    assert _renew_time(cluster) == last, "the lease kept being renewed after pykubelet stopped"
