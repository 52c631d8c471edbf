"""Faults on a real node: its own node (containerd, NATS, the services), started with `pykubelet up`."""

from __future__ import annotations

import pytest

from tests.integration.conftest import Node, launch_node, stop_node


# Package scope: this node is gone before another test package starts its own.
@pytest.fixture(scope="package")
def node(tmp_path_factory) -> Node:
    n = launch_node(tmp_path_factory.mktemp("resilience-node"))
    try:
        yield n
    finally:
        stop_node(n)
