"""cpuManagerPolicy static with reservedSystemCPUs "0" on a real node: a whole-CPU Guaranteed
container runs on CPUs of its own, every other container on the rest, and the rest grows back
when the pod is gone. The node runs the single-numa-node topology policy and the Static memory
policy too (tests/cpu_manager/conftest.py)."""

from __future__ import annotations

import os

from shared.host.cpu_topology import numa_nodes
from shared.model.cpusets import format_cpuset
from tests.cpu_manager.conftest import RECONCILE_EVERY
from tests.integration.conftest import wait_for

ALL = frozenset(os.sched_getaffinity(0))


def sleeper(node, cpu: str | None) -> dict:
    resources = {} if cpu is None else {"requests": {"cpu": cpu, "memory": "32Mi"},
                                        "limits": {"cpu": cpu, "memory": "32Mi"}}
    return {"containers": [{"name": "app", "image": node.image("busybox"), "command": ["sleep", "3600"],
                            "resources": resources}]}


def allowed(node, name: str, what: str = "Cpus_allowed_list") -> str:
    """What the kernel lets the container's main process use (its CPUs, or Mems_allowed_list)."""
    code, out = node.exec(node.pod(name)["uid"], "app", ["cat", "/proc/1/status"])
    assert code == 0, out
    return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith(what))


def allowed_cpus(node, name: str) -> str:
    return allowed(node, name)


def test_exclusive_cpus_and_the_shared_pool(pods):
    pods.write_pod("shared", sleeper(pods, None))
    pods.wait_running("shared")
    assert allowed_cpus(pods, "shared") == format_cpuset(ALL), "no CPU given out yet: the shared pool is every CPU"
    pods.write_pod("exclusive", sleeper(pods, "1"))
    pods.wait_running("exclusive")
    assert allowed_cpus(pods, "exclusive") == "1", "the first CPU not reserved, of its own"
    # The topology manager's single-numa-node policy admits it (one NUMA node has it all) and the
    # memory manager's Static policy pins its memory to that node.
    assert allowed(pods, "exclusive", "Mems_allowed_list") == format_cpuset(numa_nodes())
    # Within a reconcile period the BestEffort container leaves the CPU given out.
    rest = format_cpuset(ALL - {1})
    wait_for(lambda: allowed_cpus(pods, "shared") == rest, RECONCILE_EVERY * 3 + 10,
             f"the shared container to run on {rest} only")
    # A container started now starts on the shared pool (BestEffort: the exclusive pod took the
    # node's allocatable CPU, which is capacity less the reserved CPU).
    pods.write_pod("later", sleeper(pods, None))
    pods.wait_running("later")
    assert allowed_cpus(pods, "later") == rest
    pods.remove("exclusive.yaml")
    wait_for(lambda: pods.pod("exclusive") is None, 60, "the exclusive pod to go")
    wait_for(lambda: allowed_cpus(pods, "shared") == format_cpuset(ALL), RECONCILE_EVERY * 3 + 10,
             "the shared container to get every CPU back")
