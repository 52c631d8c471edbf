"""cpuManagerPolicy static with reservedSystemCPUs "0" on a real node: a whole-CPU Guaranteed
container runs on CPUs of its own, every other container on the rest, and the rest grows back
when the pod is gone. Its options: the reserved CPU is in no container's set
(strict-cpu-reservation), and a request whole free cores cannot meet is refused with
SMTAlignmentError (full-pcpus-only). The node runs the single-numa-node topology policy and the
Static memory policy too (tests/cpu_manager/conftest.py)."""

from __future__ import annotations

import os
import time

from shared.host.cpu_topology import numa_nodes
from shared.model.cpusets import format_cpuset
from tests.cpu_manager.conftest import RECONCILE_EVERY
from tests.integration.conftest import wait_for

ALL = frozenset(os.sched_getaffinity(0))
RESERVED = frozenset({0})  # reservedSystemCPUs (tests/cpu_manager/conftest.py)


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
    # strict-cpu-reservation: the shared pool is every CPU but the reserved one.
    pool = ALL - RESERVED
    pods.write_pod("shared", sleeper(pods, None))
    pods.wait_running("shared")
    assert allowed_cpus(pods, "shared") == format_cpuset(pool), "no CPU given out yet, and the reserved one in no pool"
    # full-pcpus-only: more than the whole free cores hold (the reserved CPU's core is not free)
    # is refused by the CPU manager, before the node's allocatable CPU is even weighed.
    pods.write_pod("too-big", sleeper(pods, str(len(ALL))))
    rejected = pods.wait_pod("too-big", lambda p: p["phase"] == "Failed", 30, "the CPU manager's refusal")
    assert rejected["status"]["reason"] == "SMTAlignmentError", rejected["status"]
    assert (f"SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {len(pool)}, "
            f"requested CPUs = {len(ALL)}, CPUs per core = 1") in rejected["status"]["message"], rejected["status"]
    pods.write_pod("exclusive", sleeper(pods, "1"))
    pods.wait_running("exclusive")
    assert allowed_cpus(pods, "exclusive") == "1", "the first CPU not reserved, of its own"
    # The topology manager's single-numa-node policy admits it (one NUMA node has it all) and the
    # memory manager's Static policy pins its memory to that node.
    assert allowed(pods, "exclusive", "Mems_allowed_list") == format_cpuset(numa_nodes())
    rest = pool - {1}
    # A container started now starts on what is left of the pool. On two CPUs nothing is (the
    # reserved CPU is not in it): as with the kubelet, it then gets the runtime's default, every
    # CPU, and the running shared container keeps its CPUs.
    pods.write_pod("later", sleeper(pods, None))
    pods.wait_running("later")
    assert allowed_cpus(pods, "later") == format_cpuset(rest or ALL)
    if rest:
        wait_for(lambda: allowed_cpus(pods, "shared") == format_cpuset(rest), RECONCILE_EVERY * 3 + 10,
                 f"the shared container to run on {format_cpuset(rest)} only")
    else:
        time.sleep(RECONCILE_EVERY * 2)
        assert allowed_cpus(pods, "shared") == format_cpuset(pool), "an empty pool is not applied"
    pods.remove("exclusive.yaml")
    wait_for(lambda: pods.pod("exclusive") is None, 60, "the exclusive pod to go")
    # Within a reconcile period every shared container is on the whole pool again: the reserved
    # CPU is taken from the one that started on every CPU.
    for name in ("shared", "later"):
        wait_for(lambda name=name: allowed_cpus(pods, name) == format_cpuset(pool), RECONCILE_EVERY * 3 + 10,
                 f"the {name} container to get the pool back, without the reserved CPU")
