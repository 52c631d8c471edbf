"""The churn test's own control plane and node: what it counts must change only with its own pods,
not with what the other cluster tests' pods are still doing (stopping, restarting)."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import Cluster, started_control_plane
from tests.integration.conftest import NODE_NAME, launch_node, require_node_prerequisites, stop_node, wait_for


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    require_node_prerequisites()
    with started_control_plane(tmp_path_factory.mktemp("churn-control-plane"), NODE_NAME) as cp:
        node = None
        try:
            node = launch_node(tmp_path_factory.mktemp("churn-node"), ["--kubeconfig", str(cp.node_kubeconfig)])
            c = Cluster(cp, node)
            wait_for(lambda: c.ready() == "True", 60, "the node to register and turn Ready")
            yield c
        finally:
            if node is not None:
                stop_node(node)
