"""Runs last: stopping pykubelet stops the heartbeat."""

from __future__ import annotations

import time

from tests.cluster.test_node import _renew_time
from tests.integration.conftest import stop_node


def test_stopped_node_stops_renewing_its_lease(cluster):
    stop_node(cluster.node)
    last = _renew_time(cluster)
    time.sleep(15)  # longer than the 10 s renewal period
    assert _renew_time(cluster) == last, "the lease kept being renewed after pykubelet stopped"
