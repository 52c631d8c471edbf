"""The node of this package: cpuManagerPolicy static, CPU 0 reserved (reservedSystemCPUs), and a
short cpuManagerReconcilePeriod so the shared pool's changes show within a test."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from tests.integration.conftest import Node, launch_node, pods, stop_node  # noqa: F401
from tests.integration.event_loops import assert_loops_never_blocked

RECONCILE_EVERY = 2  # seconds


@pytest.fixture(scope="package")
def node(tmp_path_factory) -> Iterator[Node]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("the CPU manager tests need 2 CPUs or more: one reserved, one to give out")
    n = launch_node(tmp_path_factory.mktemp("cpu-manager-node"),
                    extra_config=f"cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"
                                 f"cpuManagerReconcilePeriod: {RECONCILE_EVERY}s\n")
    try:
        yield n
    finally:
        stop_node(n)
    assert_loops_never_blocked(n.root)
