"""Faults on a real node: its own node (containerd, NATS, the services), started with `pykubelet up`."""

from tests.integration.conftest import package_node

node = package_node("resilience-node")
