"""The node of this package: cpuManagerPolicy static, CPU 0 reserved (reservedSystemCPUs), and a
short cpuManagerReconcilePeriod so the shared pool's changes show within a test; the topology
manager's single-numa-node policy and the memory manager's Static one, which a single-NUMA host
(this one) runs."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from shared.host.cpu_topology import numa_nodes
from tests.integration.conftest import Node, launch_node, pods, stop_node  # noqa: F401
from tests.integration.event_loops import assert_loops_never_blocked

RECONCILE_EVERY = 2  # seconds


@pytest.fixture(scope="package")
def node(tmp_path_factory) -> Iterator[Node]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("the CPU manager tests need 2 CPUs or more: one reserved, one to give out")
    if len(numa_nodes()) != 1:
        pytest.fail(f"the topology and memory manager tests need a single-NUMA host; this one has {len(numa_nodes())}")
    n = launch_node(tmp_path_factory.mktemp("cpu-manager-node"),
                    extra_config=f"cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"
                                 f"cpuManagerReconcilePeriod: {RECONCILE_EVERY}s\n"
                                 "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n"
                                 # evictionHard's default memory.available, the node's only memory reservation
                                 "memoryManagerPolicy: Static\nreservedMemory:\n- numaNode: 0\n  limits: {memory: 100Mi}\n")
    try:
        yield n
    finally:
        stop_node(n)
    assert_loops_never_blocked(n.root)
