"""memorySwap.swapBehavior: what swap each container is given (services/pod_sync/swap.py), what
the host offers (shared/host/swap.py), what the node refuses to start with, and the resizes the
kubelet finds infeasible for containers that may swap."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from services.pod_sync.runtime_config import NodeFacts, linux_resources
from services.pod_sync.swap import swap_behavior
from shared.config.settings import ConfigError, load_kubelet_config
from shared.host.checks import startup_problems
from shared.host.swap import LIMITED_SWAP, NO_SWAP, NodeSwap, node_swap, swap_controller
from shared.model.podspec import validate_pod
from shared.model.qos import qos_class
from tests.unit.conftest import IMG
from tests.unit.test_resize import conditions, want
from tests.unit.test_resize import pod as resize_pod

GiB = 2**30
V2_LIMITED = NodeSwap(behavior=LIMITED_SWAP, cgroup_v2=True, controller=True, capacity=2 * GiB)


def facts(tmp_path: Path, swap: NodeSwap | None) -> NodeFacts:
    return NodeFacts(name="node1", ip="192.0.2.10", cpu_millicores=2000, memory_bytes=4 * GiB, oom_floor=None,
                     pods_dir=tmp_path / "pods", swap=swap)


def pod(*resources: dict, priority: int | None = None, annotations: dict | None = None):
    containers = [{"name": f"c{i}", "image": IMG, "resources": r} for i, r in enumerate(resources)]
    spec: dict = {"containers": containers}
    if priority is not None:
        spec["priority"] = priority
    return validate_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                                      "annotations": annotations or {}}, "spec": spec})


def resources(tmp_path, p, swap, index=0):
    c = p.spec.containers[index]
    return linux_resources(p, c, qos_class(p), facts(tmp_path, swap))


BURSTABLE = {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}


def test_limited_swap_gives_a_burstable_container_its_share_of_the_nodes_swap(tmp_path):
    res = resources(tmp_path, pod(BURSTABLE), V2_LIMITED)
    # 1Gi of the node's 4Gi memory: a quarter of its 2Gi of swap.
    assert dict(res.unified) == {"memory.swap.max": str(512 * 2**20)}
    assert res.memory_limit_in_bytes == 2 * GiB


@pytest.mark.parametrize("p, why", [
    (pod({"requests": {"memory": "1Gi", "cpu": "1"}, "limits": {"memory": "1Gi", "cpu": "1"}}), "Guaranteed"),
    (pod({}), "BestEffort"),
    (pod({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}, {"requests": {"cpu": "100m"}}),
     "Burstable, but its memory request is its limit"),
    (pod(BURSTABLE, priority=2_000_000_000), "a critical pod (system priority)"),
    (pod(BURSTABLE, annotations={"kubernetes.io/config.source": "file"}), "a static pod"),
])
def test_limited_swap_gives_no_swap_to_other_containers(tmp_path, p, why):
    assert dict(resources(tmp_path, p, V2_LIMITED).unified) == {"memory.swap.max": "0"}, why


def test_a_burstable_container_asking_no_memory_gets_no_swap(tmp_path):
    p = pod({"requests": {"memory": "1Gi"}}, {"requests": {"cpu": "100m"}})
    assert swap_behavior(p, p.spec.containers[1], "Burstable", V2_LIMITED) == NO_SWAP
    assert dict(resources(tmp_path, p, V2_LIMITED, index=1).unified) == {"memory.swap.max": "0"}


def test_no_swap_is_the_default_and_holds_every_container_at_zero_swap_on_cgroup_v2(tmp_path):
    swap = replace(V2_LIMITED, behavior=NO_SWAP)
    assert dict(resources(tmp_path, pod(BURSTABLE), swap).unified) == {"memory.swap.max": "0"}
    assert dict(resources(tmp_path, pod({}), swap).unified) == {"memory.swap.max": "0"}


def test_no_swap_on_cgroup_v1_caps_memory_and_swap_together_at_the_memory_limit(tmp_path):
    swap = NodeSwap(behavior=NO_SWAP, cgroup_v2=False, controller=True)
    res = resources(tmp_path, pod(BURSTABLE), swap)
    assert res.memory_swap_limit_in_bytes == res.memory_limit_in_bytes == 2 * GiB
    assert dict(res.unified) == {}
    assert resources(tmp_path, pod({}), swap).memory_swap_limit_in_bytes == 0, "no limit: nothing to cap"


def test_without_the_swap_controller_no_swap_setting_is_made(tmp_path):
    for swap in (replace(V2_LIMITED, controller=False), NodeSwap(controller=False), None):
        res = resources(tmp_path, pod(BURSTABLE), swap)
        assert dict(res.unified) == {} and res.memory_swap_limit_in_bytes == 0


def test_a_request_above_the_nodes_memory_gets_no_swap(tmp_path):
    p = pod({"requests": {"memory": "8Gi"}, "limits": {"memory": "16Gi"}})
    assert dict(resources(tmp_path, p, V2_LIMITED).unified) == {"memory.swap.max": "0"}


def host(tmp_path: Path, v2: bool = True, controller: bool = True, swap_kib: int = 1048572) -> tuple[Path, Path]:
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:        4000000 kB\nSwapTotal:       {swap_kib} kB\n")
    (proc / "swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n")
    own = cgroup / "system.slice" / "pykubelet-pod-sync.service"
    own.mkdir(parents=True)
    if v2:
        (cgroup / "cgroup.controllers").write_text("cpu memory pids\n")
        (proc / "self" / "cgroup").write_text("0::/system.slice/pykubelet-pod-sync.service\n")
        if controller:
            (own / "memory.swap.max").write_text("max\n")
    else:
        (proc / "self" / "cgroup").write_text("4:memory:/\n")
        (cgroup / "memory").mkdir()
        if controller:
            (cgroup / "memory" / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    return proc, cgroup


def test_the_host_is_read_as_the_kubelet_reads_it(tmp_path):
    proc, cgroup = host(tmp_path / "a")
    assert node_swap("", cgroup, proc) == NodeSwap(NO_SWAP, cgroup_v2=True, controller=True, capacity=1048572 * 1024)
    assert node_swap("LimitedSwap", cgroup, proc).behavior == LIMITED_SWAP
    proc, cgroup = host(tmp_path / "b", controller=False)
    assert not swap_controller(cgroup, proc), "v2: memory.swap.max in pykubelet's own cgroup, not the root's"
    proc, cgroup = host(tmp_path / "c", v2=False)
    assert node_swap("", cgroup, proc) == NodeSwap(NO_SWAP, cgroup_v2=False, controller=True, capacity=1048572 * 1024)
    proc, cgroup = host(tmp_path / "d", v2=False, controller=False)
    assert not swap_controller(cgroup, proc), "v1: swap accounting (memory.memsw.*) is off"


def test_a_hostile_cgroup_path_is_not_followed(tmp_path):
    proc, cgroup = host(tmp_path)
    (proc / "self" / "cgroup").write_text("0::/../../etc\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "memory.swap.max").write_text("max\n")
    assert not swap_controller(cgroup, proc)


def test_limited_swap_is_refused_where_no_container_could_swap(tmp_path):
    limited = load_kubelet_config({"memorySwap": {"swapBehavior": "LimitedSwap"}})[0]
    proc, cgroup = host(tmp_path / "v2")
    assert startup_problems(limited, proc, cgroup) == []
    proc, cgroup = host(tmp_path / "v1", v2=False)
    assert startup_problems(limited, proc, cgroup) == [
        "memorySwap.swapBehavior: LimitedSwap needs cgroup v2 (containers get NoSwap on cgroup v1): boot the host "
        "with systemd.unified_cgroup_hierarchy=1 or set swapBehavior to NoSwap"]
    assert startup_problems(load_kubelet_config({})[0], proc, cgroup) == [], "NoSwap works on cgroup v1"
    proc, cgroup = host(tmp_path / "nocontroller", controller=False)
    [problem] = startup_problems(limited, proc, cgroup)
    assert problem.startswith("memorySwap.swapBehavior: LimitedSwap needs the swap controller (memory.swap.max")


def test_swap_behavior_is_checked_as_the_kubelet_checks_it():
    assert load_kubelet_config({"memorySwap": {"swapBehavior": "NoSwap"}})[0].memory_swap.swap_behavior == "NoSwap"
    with pytest.raises(ConfigError) as err:
        load_kubelet_config({"memorySwap": {"swapBehavior": "UnlimitedSwap"}})
    assert 'memorySwap.swapBehavior "UnlimitedSwap" must be one of: "", "LimitedSwap" or "NoSwap"' in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_kubelet_config({"memorySwap": {"swapBehaviour": "NoSwap"}})
    assert "swapBehaviour" in str(err.value)


@pytest.fixture
def node(settings):
    cgroups = settings.root_dir / "cgroup"
    for controller in ("cpu", "memory"):
        (cgroups / controller).mkdir(parents=True)
    return replace(facts(settings.root_dir, V2_LIMITED), cgroup_root=cgroups)


async def test_a_memory_resize_of_a_container_that_may_swap_is_infeasible(syncer, rt, store):
    want(store, resize_pod(memory="64Mi", memory_limit="256Mi"))
    await syncer.sync("uid1")
    want(store, resize_pod(memory="128Mi", memory_limit="256Mi", generation=2))
    await syncer.sync("uid1")
    pending = conditions(store)["PodResizePending"]
    assert (pending["reason"], pending["message"]) == \
        ("Infeasible", "In-place resize of containers with swap is not supported.")
    assert rt.ops("update_container_resources") == []
    # A CPU resize of the same container is no swap matter, nor is a memory one that restarts it.
    want(store, resize_pod(cpu="200m", memory="64Mi", memory_limit="256Mi", generation=3))
    await syncer.sync("uid1")
    assert "PodResizePending" not in conditions(store)
    want(store, resize_pod(cpu="200m", memory="128Mi", memory_limit="256Mi", generation=4,
                           policy={"memory": "RestartContainer"}))
    await syncer.sync("uid1")
    assert "PodResizePending" not in conditions(store)
