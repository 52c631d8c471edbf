"""The churn test's and benchmark's reading of a service's /metrics."""

from tests.node_inventory import bus_subscriptions

METRICS = """# HELP pykubelet_bus_subscriptions Bus subscriptions this service holds open.
# TYPE pykubelet_bus_subscriptions gauge
pykubelet_bus_subscriptions 7.0
pykubelet_bus_subscriptions_total 99.0
"""


def test_the_gauge_is_read_per_service_and_nothing_that_only_starts_like_it():
    got = bus_subscriptions({"probe": METRICS, "volume": "pykubelet_bus_subscriptions 3.0\n"})
    assert got == {"probe": 7.0, "volume": 3.0}


def test_a_service_without_the_gauge_is_left_out():
    assert bus_subscriptions({"node-api": "process_open_fds 12.0\n"}) == {}
