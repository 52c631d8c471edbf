"""cpuManagerPolicy static with reservedSystemCPUs (services/pod_sync/cpu_manager.py), and the
topology and memory managers on a single-NUMA host: the CPU sets and memory nodes containers are
created with and kept on, through the syncer against the recording fake runtime and a real
SQLite store."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from services.pod_sync.cpu_manager import CPUManager, CPUSetReconciler, SMTAlignmentError, StaticPolicy, exclusive_count
from services.pod_sync.images import ImageManager
from services.pod_sync.syncer import PodSyncer
from shared.config.cpu_policy_options import CPUPolicyOptions, parse_cpu_policy_options
from shared.config.settings import ConfigError, load_kubelet_config
from shared.host.checks import startup_problems
from shared.host.cpu_topology import physical_cores, static_policy_problem, topology_order
from shared.host.node_resources import Reservations, allocatable
from shared.model.cpusets import CPUSetError, format_cpuset, parse_cpuset
from shared.model.podspec import validate_pod
from shared.store import DesiredPod
from shared.tasks.retry import Backoff
from tests.unit.conftest import IMG


def pod(uid: str, cpu: str | None, memory: str = "64Mi", init_cpu: str | None = None):
    def resources(c: str | None) -> dict:
        return {} if c is None else {"requests": {"cpu": c, "memory": memory}, "limits": {"cpu": c, "memory": memory}}
    spec: dict = {"containers": [{"name": "app", "image": IMG, "resources": resources(cpu)}]}
    if init_cpu is not None:
        spec["initContainers"] = [{"name": "setup", "image": IMG, "resources": resources(init_cpu)}]
    return validate_pod({"metadata": {"name": uid, "uid": uid}, "spec": spec})


def want(store, p) -> None:
    with store.session() as s:
        s.merge(DesiredPod(uid=p.uid, namespace="default", name=p.metadata.name, source="file",
                           manifest=p.to_manifest(), grace_period_seconds=30))


@pytest.mark.parametrize(("text", "cpus", "again"), [
    ("0-2,5", {0, 1, 2, 5}, "0-2,5"), ("", set(), ""), ("3", {3}, "3"), ("1,0", {0, 1}, "0-1"), ("3-1", None, None), ("0,x", None, None),
])
def test_cpu_lists_read_and_write_as_the_kernel_writes_them(text, cpus, again):
    if cpus is None:
        with pytest.raises(CPUSetError):
            parse_cpuset(text)
        return
    assert parse_cpuset(text) == cpus and format_cpuset(parse_cpuset(text)) == again


def test_topology_order_keeps_a_cores_threads_together(tmp_path):
    # Two cores of two threads, numbered as Linux often numbers them: 0,2 on core 0; 1,3 on core 1.
    for cpu, core in ((0, 0), (1, 1), (2, 0), (3, 1)):
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0\n")
        (topo / "core_id").write_text(f"{core}\n")
    assert topology_order(frozenset({0, 1, 2, 3}), tmp_path) == [0, 2, 1, 3]


def test_only_whole_cpus_of_guaranteed_pods_are_exclusive():
    for cpu, count in (("2", 2), ("1500m", 0), (None, 0)):  # None: BestEffort
        p = pod("a", cpu)
        assert exclusive_count(p, p.spec.containers[0]) == count
    burstable = validate_pod({"metadata": {"name": "d", "uid": "d"}, "spec": {"containers": [
        {"name": "app", "image": IMG, "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}]}})
    assert exclusive_count(burstable, burstable.spec.containers[0]) == 0


def test_the_policy_never_gives_out_a_reserved_cpu_nor_one_taken():
    policy = StaticPolicy([0, 1, 2, 3], frozenset({0}))
    assert policy.allocate(pod("a", "2"), frozenset()) == {"app": frozenset({1, 2})}
    assert policy.allocate(pod("b", "1"), frozenset({1, 2})) == {"app": frozenset({3})}
    with pytest.raises(Exception, match="not enough cpus available to satisfy request: requested=2, available=1"):
        policy.allocate(pod("c", "2"), frozenset({1, 2}))
    # The init container runs first, alone: it reuses the app container's CPUs, and takes more
    # only for what it asks beyond them.
    assert policy.allocate(pod("d", "1", init_cpu="2"), frozenset()) == {"app": frozenset({1}),
                                                                         "setup": frozenset({1, 2})}
    assert policy.shared_pool(frozenset({1, 2})) == {0, 3}


def _two_threads_a_core(sys_cpu, cores: int) -> frozenset[int]:
    """A host of `cores` cores of two threads each, numbered as Linux often numbers them (core c
    has CPUs c and c + cores)."""
    for cpu in range(2 * cores):
        topo = sys_cpu / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0\n")
        (topo / "core_id").write_text(f"{cpu % cores}\n")
    return frozenset(range(2 * cores))


def test_full_pcpus_only_gives_out_whole_cores_and_refuses_what_they_cannot_meet(tmp_path):
    cpus = _two_threads_a_core(tmp_path, 4)
    cores = physical_cores(cpus, tmp_path)
    assert cores == [frozenset({0, 4}), frozenset({1, 5}), frozenset({2, 6}), frozenset({3, 7})]
    order = topology_order(cpus, tmp_path)
    whole = StaticPolicy(order, frozenset({0}), cores, CPUPolicyOptions(full_pcpus_only=True))
    assert whole.cpus_per_core == 2
    # CPU 0 is reserved, so its sibling 4 is never given out either: whole cores only.
    assert whole.allocate(pod("a", "2"), frozenset()) == {"app": frozenset({1, 5})}
    assert whole.allocate(pod("b", "4"), frozenset({1, 5})) == {"app": frozenset({2, 6, 3, 7})}
    with pytest.raises(SMTAlignmentError) as odd:
        whole.allocate(pod("c", "3"), frozenset())
    assert str(odd.value) == "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    with pytest.raises(SMTAlignmentError) as odd_init:
        whole.allocate(pod("d", "2", init_cpu="1"), frozenset())
    assert "requested 1 cpus not multiple" in str(odd_init.value), "init containers are checked too"
    with pytest.raises(SMTAlignmentError) as full:
        whole.allocate(pod("e", "6"), frozenset({1, 5}))
    assert str(full.value) == ("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 4, "
                               "requested CPUs = 6, CPUs per core = 2")
    # Without the option the same node hands out single threads, the reserved CPU's sibling too.
    threads = StaticPolicy(order, frozenset({0}), cores)
    assert threads.allocate(pod("c", "3"), frozenset()) == {"app": frozenset({4, 1, 5})}


def test_strict_cpu_reservation_takes_the_reserved_cpus_out_of_the_shared_pool():
    loose = StaticPolicy([0, 1, 2, 3], frozenset({0}))
    strict = StaticPolicy([0, 1, 2, 3], frozenset({0}), options=CPUPolicyOptions(strict_cpu_reservation=True))
    assert loose.shared_pool(frozenset({1})) == {0, 2, 3}
    assert strict.shared_pool(frozenset({1})) == {2, 3}
    # Every CPU not reserved given out: an empty pool, which containers are not put on.
    manager = CPUManager(strict, {"g": {"app": frozenset({1, 2, 3})}})
    assert manager.cpuset_for("b", "app") == ""
    assert manager.cpuset_for("g", "app") == "1-3"


@pytest.mark.parametrize(("options", "policy", "error"), [
    ({"full-pcpus-only": "yes"}, "static",
     'bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes": invalid syntax'),
    ({"no-such-option": "true"}, "static", 'unknown CPU Manager Policy option: "no-such-option"'),
    ({"align-by-socket": "true"}, "static",
     'CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" provided'),
    ({"prefer-align-cpus-by-uncorecache": "true"}, "static",
     'option "prefer-align-cpus-by-uncorecache" is not implemented: pykubelet does not align CPUs to uncore caches'),
    ({"distribute-cpus-across-numa": "true"}, "static", "pykubelet does not spread CPUs over NUMA nodes"),
    ({"full-pcpus-only": "true"}, "none", "None policy: received unsupported options=map[full-pcpus-only:true]"),
])
def test_cpu_manager_policy_options_are_checked_with_the_kubelets_words(options, policy, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_kubelet_config({"cpuManagerPolicy": policy, "reservedSystemCPUs": "0", "cpuManagerPolicyOptions": options})


def test_cpu_manager_policy_options_read_as_go_reads_booleans():
    k, _ = load_kubelet_config({"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
                                "cpuManagerPolicyOptions": {"full-pcpus-only": "T", "strict-cpu-reservation": "0"}})
    assert parse_cpu_policy_options(k.cpu_manager_policy_options, k.cpu_manager_policy) == CPUPolicyOptions(
        full_pcpus_only=True, strict_cpu_reservation=False)


@pytest.mark.parametrize(("config", "problem"), [
    ({"cpuManagerPolicy": "static"}, "cpuManagerPolicy static requires systemReserved.cpu + kubeReserved.cpu (or "
                                     "reservedSystemCPUs) to be greater than zero"),
    ({"cpuManagerPolicy": "static", "reservedSystemCPUs": "0-1"}, "reservedSystemCPUs '0-1' is every CPU of the node"),
    ({"cpuManagerPolicy": "static", "reservedSystemCPUs": "4"}, "reservedSystemCPUs '4': CPUs 4 are not online here"),
    ({"cpuManagerPolicy": "static", "systemReserved": {"cpu": "1500m"}}, "leaves none of the node's 2 CPUs for pods"),
    ({"cpuManagerPolicy": "static", "kubeReserved": {"cpu": "500m"}}, ""),
    ({"cpuManagerPolicy": "none"}, ""),
])
def test_the_static_policy_needs_a_reservation_that_leaves_cpus(tmp_path, config, problem):
    k, _ = load_kubelet_config({"failSwapOn": False, **config})
    problems = startup_problems(k, tmp_path, tmp_path, cpus=frozenset({0, 1}))
    assert [p for p in problems if problem and problem in p] if problem else problems == []


def test_reserved_system_cpus_are_the_nodes_cpu_reservation():
    k, _ = load_kubelet_config({"reservedSystemCPUs": "0", "systemReserved": {"cpu": "300m"},
                                "kubeReserved": {"cpu": "200m", "memory": "1Gi"}})
    assert allocatable(4000, 8 * 2**30, Reservations.from_config(k))["cpu"] == 3000
    with pytest.raises(ConfigError, match="reservedSystemCPUs: 'a-b' is not a CPU list"):
        load_kubelet_config({"reservedSystemCPUs": "a-b"})
    assert static_policy_problem("", 1000, frozenset({0, 1, 2})) == ""


@pytest.fixture
def static_syncer(rt, store, settings, node, events):
    import dataclasses

    # Three CPUs, CPU 0 reserved: room for 3 CPUs of requests, 2 of them exclusive.
    cpus = CPUManager(StaticPolicy([0, 1, 2], frozenset({0})))
    syncer = PodSyncer(rt, ImageManager(rt, Backoff(10, 300)), store, settings, Backoff(10, 300),
                       dataclasses.replace(node, cpu_millicores=3000), events, cpus=cpus)
    return syncer, cpus


def cpuset_of(rt, uid: str) -> str:
    [cfg] = [c for c in rt.created_configs.values() if c.labels["io.kubernetes.pod.uid"] == uid]
    return cfg.linux.resources.cpuset_cpus


async def test_exclusive_cpus_for_whole_cpu_guaranteed_containers_and_the_shared_pool_for_others(
        static_syncer, rt, store, node):
    syncer, cpus = static_syncer
    for p in (pod("g", "1"), pod("b", None)):
        want(store, p)
        await syncer.sync(p.uid)
    assert cpuset_of(rt, "g") == "1"
    assert cpuset_of(rt, "b") == "0,2", "the shared pool: every CPU but those given out, the reserved one included"
    with store.session() as s:
        assert s.get(DesiredPod, "g").exclusive_cpus == {"app": "1"}
    # A second Guaranteed pod takes the last free CPU; a third does not fit and is rejected as
    # the kubelet rejects it.
    want(store, pod("g2", "1"))
    await syncer.sync("g2")
    assert cpuset_of(rt, "g2") == "2"
    want(store, pod("g3", "1"))
    await syncer.sync("g3")
    with store.session() as s:
        rejected = s.get(DesiredPod, "g3")
    assert (rejected.rejection_reason, rejected.rejection_message) == (
        "UnexpectedAdmissionError",
        "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is "
        "unexpected")
    # The shared pool shrank: the reconcile moves the BestEffort container onto what is left.
    reconciler = CPUSetReconciler(cpus, rt, store, node, syncer.pod_at_allocation, 10.0)
    await reconciler.reconcile()
    updates = {cid: r.cpuset_cpus for cid, r in rt.updated_resources.items()}
    by_pod = {c.labels["io.kubernetes.pod.uid"]: cid for cid, c in rt.created_configs.items()}
    assert updates[by_pod["b"]] == "0" and updates[by_pod["g"]] == "1" and updates[by_pod["g2"]] == "2"
    assert await reconciler.reconcile() == 0, "nothing to do while nothing changes"


async def test_cpus_are_given_back_when_the_pod_is_gone(static_syncer, rt, store, node):
    syncer, cpus = static_syncer
    for p in (pod("g", "2"), pod("b", None)):
        want(store, p)
        await syncer.sync(p.uid)
    assert cpuset_of(rt, "g") == "1-2" and cpuset_of(rt, "b") == "0"
    reconciler = CPUSetReconciler(cpus, rt, store, node, syncer.pod_at_allocation, 10.0)
    await reconciler.reconcile()
    with store.session() as s:
        s.delete(s.get(DesiredPod, "g"))
    before = len(rt.calls)
    await reconciler.reconcile()
    after = [rt.updated_resources[cid].cpuset_cpus for op, cid in rt.calls[before:] if op == "update_container_resources"]
    assert after == ["0-2"], "the BestEffort container gets the whole node again"
    with store.session() as s:
        assert [d.uid for d in s.scalars(select(DesiredPod))] == ["b"]


async def test_a_cpu_resize_of_a_guaranteed_pod_is_infeasible_under_the_static_policy(static_syncer, store):
    syncer, _ = static_syncer
    from services.pod_sync.resizer import ResizeState

    p = pod("g", "1")
    want(store, p)
    await syncer.sync("g")
    state = ResizeState(allocated={"app": {"requests": {"cpu": "1", "memory": "64Mi"},
                                           "limits": {"cpu": "1", "memory": "64Mi"}}})
    bigger = pod("g", "2")
    syncer.resizer.allocate(bigger, state, False, lambda: [], {"cpu": 3000, "memory": 2**32})
    assert state.pending["reason"] == "Infeasible"
    assert state.pending["message"] == 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'


# The topology and memory managers, for a single-NUMA host.

MEMORY_STATIC = {"memoryManagerPolicy": "Static", "systemReserved": {"memory": "1Gi"},
                 "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}]}  # 1Gi + evictionHard's 100Mi


@pytest.mark.parametrize("config", [
    {"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod"},
    {"topologyManagerPolicy": "restricted"}, MEMORY_STATIC,
])
def test_the_numa_policies_start_on_a_single_numa_host_and_are_refused_on_more(tmp_path, config):
    k, _ = load_kubelet_config({"failSwapOn": False, **config})
    assert startup_problems(k, tmp_path, tmp_path, numa=frozenset({0}), memory_bytes=8 * 2**30) == []
    problems = startup_problems(k, tmp_path, tmp_path, numa=frozenset({0, 1}), memory_bytes=8 * 2**30)
    assert problems and all("this host has 2 NUMA nodes and pykubelet aligns resources only on a host with one"
                            in p for p in problems)


@pytest.mark.parametrize(("config", "problem"), [
    ({**MEMORY_STATIC, "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}]},
     'reservedMemory: the total amount "1024Mi" of type "memory" is not equal to the value "1124Mi" determined by '
     'Node Allocatable feature'),
    ({**MEMORY_STATIC, "reservedMemory": [{"numaNode": 3, "limits": {"memory": "1124Mi"}}]},
     "the reserved memory configuration references a NUMA node 3 that does not exist on this machine"),
])
def test_reserved_memory_must_be_the_nodes_memory_reservation(tmp_path, config, problem):
    k, _ = load_kubelet_config({"failSwapOn": False, **config})
    assert problem in "; ".join(startup_problems(k, tmp_path, tmp_path, numa=frozenset({0}), memory_bytes=8 * 2**30))


@pytest.mark.parametrize(("config", "error"), [
    ({"memoryManagerPolicy": "Static"}, "memoryManagerPolicy Static needs reservedMemory"),
    ({"reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}]},
     "reservedMemory: only the memory manager's Static policy uses it"),
    ({**MEMORY_STATIC, "reservedMemory": [{"numaNode": 0, "limits": {"hugepages-2Mi": "1Gi"}}]},
     "hugepages-2Mi: only memory is implemented by pykubelet (no hugepages)"),
    ({"topologyManagerPolicy": "strict"}, "topologyManagerPolicy"),
])
def test_bad_numa_settings_are_refused_naming_the_field(config, error):
    with pytest.raises(ConfigError) as exc:
        load_kubelet_config(config)
    assert error in str(exc.value)


async def test_the_static_memory_policy_pins_guaranteed_containers_memory(rt, store, settings, node, events):
    import dataclasses

    syncer = PodSyncer(rt, ImageManager(rt, Backoff(10, 300)), store, settings, Backoff(10, 300),
                       dataclasses.replace(node, guaranteed_mems="0"), events)
    for p in (pod("g", "500m"), pod("b", None)):
        want(store, p)
        await syncer.sync(p.uid)
    mems = {c.labels["io.kubernetes.pod.uid"]: c.linux.resources.cpuset_mems for c in rt.created_configs.values()}
    assert mems == {"g": "0", "b": ""}
    from services.pod_sync.resizer import ResizeState

    state = ResizeState(allocated={"app": {"requests": {"cpu": "500m", "memory": "64Mi"},
                                           "limits": {"cpu": "500m", "memory": "64Mi"}}})
    syncer.resizer.allocate(pod("g", "500m", memory="128Mi"), state, False, lambda: [], {"cpu": 2000, "memory": 2**32})
    assert state.pending["message"] == 'Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"'


@pytest.mark.parametrize(("options", "error"), [
    ({"prefer-closest-numa-nodes": "yes"},
     'bad value for option "prefer-closest-numa-nodes": strconv.ParseBool: parsing "yes": invalid syntax'),
    ({"max-allowable-numa-nodes": "many"}, 'unable to convert policy option to integer "max-allowable-numa-nodes": '
                                           'strconv.Atoi: parsing "many": invalid syntax'),
    ({"max-allowable-numa-nodes": "4"}, 'the minimum value of "max-allowable-numa-nodes" should not be less than 8'),
    ({"single-numa": "true"}, 'unknown Topology Manager Policy option: "single-numa"'),
])
def test_topology_manager_policy_options_are_checked_with_the_kubelets_words(tmp_path, options, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_kubelet_config({"topologyManagerPolicyOptions": options})
    # Taken as the kubelet takes them; a single-NUMA host starts with them (they change nothing there).
    k, _ = load_kubelet_config({"failSwapOn": False, "topologyManagerPolicy": "single-numa-node",
                                "topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "true",
                                                                 "max-allowable-numa-nodes": "16"}})
    assert startup_problems(k, tmp_path, tmp_path, numa=frozenset({0}), memory_bytes=8 * 2**30) == []
