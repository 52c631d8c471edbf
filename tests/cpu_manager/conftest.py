"""The node of this package: cpuManagerPolicy static, CPU 0 reserved (reservedSystemCPUs), and a
short cpuManagerReconcilePeriod so the shared pool's changes show within a test; the topology
manager's single-numa-node policy and the memory manager's Static one, which a single-NUMA host
(this one) runs.

Beside them, settings whose effect test_node_settings.py observes: logging as JSON, the kubelet
API without its debugging handlers (and x509 clients of the tests' CA), short periods of the
manifest directory's rescan (fileCheckFrequency) and of the full resync (syncFrequency), and a
short runtimeRequestTimeout, and image pulls in parallel (serializeImagePulls false,
maxParallelImagePulls 2)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

import pytest

from shared.host.cpu_topology import numa_nodes
from tests.cluster.pki import PKI, CertPair
from tests.integration.conftest import Node, launch_node, pods, stop_node  # noqa: F401
from tests.integration.event_loops import assert_loops_never_blocked

RECONCILE_EVERY = 2  # seconds
FILE_CHECK_EVERY, SYNC_EVERY = 2, 3  # seconds; the kubelet's defaults are 20 s and 1 min
RUNTIME_TIMEOUT = 10  # runtimeRequestTimeout, seconds; the kubelet's default is 2 min
PARALLEL_PULLS = 2  # maxParallelImagePulls, with serializeImagePulls false


@dataclass
class SettingsNode:
    node: Node
    client: CertPair  # a client certificate the kubelet API accepts


@pytest.fixture(scope="package")
def settings_node(tmp_path_factory) -> Iterator[SettingsNode]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("the CPU manager tests need 2 CPUs or more: one reserved, one to give out")
    if len(numa_nodes()) != 1:
        pytest.fail(f"the topology and memory manager tests need a single-NUMA host; this one has {len(numa_nodes())}")
    pki = PKI(tmp_path_factory.mktemp("cpu-manager-pki"))
    client = pki.issue("client", "settings-tester")
    n = launch_node(tmp_path_factory.mktemp("cpu-manager-node"),
                    # flags win over the config: these replace the integration node's periods
                    [f"--file-check-frequency={FILE_CHECK_EVERY}s", f"--sync-frequency={SYNC_EVERY}s"],
                    extra_config=f"cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"
                                 f"cpuManagerReconcilePeriod: {RECONCILE_EVERY}s\n"
                                 "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n"
                                 # evictionHard's default memory.available, the node's only memory reservation
                                 "memoryManagerPolicy: Static\nreservedMemory:\n- numaNode: 0\n  limits: {memory: 100Mi}\n"
                                 "logging:\n  format: json\nenableDebuggingHandlers: false\n"
                                 f"runtimeRequestTimeout: {RUNTIME_TIMEOUT}s\n"
                                 f"serializeImagePulls: false\nmaxParallelImagePulls: {PARALLEL_PULLS}\n"
                                 "authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: false\n"
                                 f"  x509:\n    clientCAFile: {pki.ca.cert}\n"
                                 "authorization:\n  mode: AlwaysAllow\n")
    try:
        yield SettingsNode(n, client)
    finally:
        stop_node(n)
    assert_loops_never_blocked(n.root)


@pytest.fixture(scope="package")
def node(settings_node: SettingsNode) -> Node:
    return settings_node.node
