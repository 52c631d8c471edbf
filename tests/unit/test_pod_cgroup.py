"""The pod cgroup's settings (services/pod_sync/pod_cgroup.py) and pod-level resources: QoS,
requests, what containers without limits get, and the API server's rules for static pods."""

import pytest

from services.pod_sync import pod_cgroup
from services.pod_sync.pod_cgroup import PodCgroupConfig, pod_cgroup_config
from services.pod_sync.resources import container_resources
from shared.model.podspec import ManifestInvalid, validate_pod
from shared.model.qos import pod_requests, qos_class
from shared.store import DesiredPod
from tests.unit.conftest import IMG

MI = 2**20


def pod(*containers, resources=None, inits=(), os=None):
    spec = {"containers": [{"name": f"c{i}", "image": IMG, "resources": r} for i, r in enumerate(containers)],
            "initContainers": [{"name": f"i{i}", "image": IMG, **r} for i, r in enumerate(inits)]}
    if resources is not None:
        spec["resources"] = resources
    if os is not None:
        spec["os"] = {"name": os}
    return validate_pod({"metadata": {"name": "p", "uid": "uid1"}, "spec": spec})


def limits(cpu=None, memory=None, requests=None):
    return {"limits": {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}, "requests": requests or {}}


def test_pod_cgroup_of_container_limits_is_their_sum_and_of_requests_the_shares():
    p = pod(limits("200m", "64Mi"), limits("300m", "32Mi"))
    assert qos_class(p) == "Guaranteed"
    assert pod_cgroup_config(p) == PodCgroupConfig(cpu_shares=512, cpu_quota=50_000, memory_limit=96 * MI)


def test_without_cpu_cfs_quota_cpu_limits_get_no_quota_and_the_rest_stays():
    p = pod(limits("200m", "64Mi"), limits("300m", "32Mi"))
    assert pod_cgroup_config(p, cfs_quota=False) == PodCgroupConfig(cpu_shares=512, cpu_quota=None,
                                                                     memory_limit=96 * MI)
    res = container_resources(p.spec.containers[0], qos_class(p), 4096 * MI, None, p, cfs_quota=False)
    assert (res.cpu_quota, res.cpu_shares, res.memory_limit_in_bytes) == (0, 204, 64 * MI)  # 0: no quota in CRI
    assert container_resources(p.spec.containers[0], qos_class(p), 4096 * MI, None, p).cpu_quota == 20_000


def test_pod_cgroup_has_no_limit_unless_every_container_has_one():
    p = pod(limits("200m", "64Mi", {"cpu": "100m"}), {"requests": {"cpu": "100m"}})
    assert pod_cgroup_config(p) == PodCgroupConfig(cpu_shares=204, cpu_quota=None, memory_limit=None)


def test_init_containers_count_as_the_kubelet_counts_them():
    """The larger of the app containers together and the largest init container (sidecars
    running beside both)."""
    p = pod(limits("100m", "64Mi"), inits=[{"resources": limits("500m", "32Mi")},
                                           {"resources": limits("50m", "16Mi"), "restartPolicy": "Always"}])
    assert pod_cgroup_config(p) == PodCgroupConfig(cpu_shares=563, cpu_quota=55_000, memory_limit=80 * MI)


def test_best_effort_pods_get_the_minimum_shares():
    assert pod_cgroup_config(pod({})) == PodCgroupConfig(2, None, None)


def test_pod_level_resources_set_the_pod_cgroup_qos_and_requests():
    p = pod({}, {"requests": {"memory": "16Mi"}},
            resources={"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}})
    assert qos_class(p) == "Burstable", "the pod's own resources decide, not its containers'"
    assert pod_requests(p) == {"cpu": 500, "memory": 128 * MI}
    assert pod_cgroup_config(p) == PodCgroupConfig(cpu_shares=512, cpu_quota=100_000, memory_limit=256 * MI)
    guaranteed = pod({}, resources={"limits": {"cpu": "1", "memory": "256Mi"}})
    assert qos_class(guaranteed) == "Guaranteed"
    assert qos_class(pod({}, resources={})) == "BestEffort", "an empty resources: {} is no resources"


def test_containers_without_limits_get_the_pods_and_share_its_memory_request():
    p = pod({}, limits("200m", "64Mi", {"memory": "32Mi"}),
            resources={"requests": {"cpu": "500m", "memory": "96Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}})
    free = container_resources(p.spec.containers[0], qos_class(p), 4096 * MI, None, p)
    assert (free.cpu_quota, free.memory_limit_in_bytes, free.cpu_shares) == (100_000, 256 * MI, 1024)
    own = container_resources(p.spec.containers[1], qos_class(p), 4096 * MI, None, p)
    assert (own.cpu_quota, own.memory_limit_in_bytes) == (20_000, 64 * MI)
    # 96Mi for the pod, 32Mi of it the second container's: 32Mi more for each of the two.
    assert free.oom_score_adj == 1000 - 1000 * (32 * MI) // (4096 * MI)
    assert own.oom_score_adj == 1000 - 1000 * (64 * MI) // (4096 * MI)


@pytest.mark.parametrize("resources,error", [
    ({"limits": {"ephemeral-storage": "1Gi"}}, "pod-level resources may only be cpu, memory and hugepages-*"),
    ({"limits": {"cpu": "100m"}}, "containers[c0].resources.limits.cpu: must be less than or equal to pod limits"),
    ({"requests": {"memory": "16Mi"}}, "resources.requests.memory: must be greater than or equal to aggregate"),
])
def test_pod_level_resources_keep_the_api_servers_rules(resources, error):
    with pytest.raises(ManifestInvalid, match=error.replace("[", r"\[").replace("]", r"\]").replace("*", r"\*")):
        pod(limits("200m", "64Mi"), resources=resources)


def test_v1_pod_cgroup_is_made_and_written(tmp_path):
    for controller in ("cpu", "memory"):
        (tmp_path / controller).mkdir()
    parent = "/kubepods/burstable/poduid1"
    assert pod_cgroup.ensure(parent, PodCgroupConfig(204, 50_000, None), tmp_path) == []
    cpu, memory = tmp_path / "cpu/kubepods/burstable/poduid1", tmp_path / "memory/kubepods/burstable/poduid1"
    assert (cpu / "cpu.shares").read_text() == "204" and (cpu / "cpu.cfs_quota_us").read_text() == "50000"
    assert (cpu / "cpu.cfs_period_us").read_text() == "100000"
    assert (memory / "memory.limit_in_bytes").read_text() == "-1"
    assert pod_cgroup.current(parent, tmp_path) == PodCgroupConfig(204, 50_000, None)


def test_v2_pod_cgroup_delegates_controllers_and_writes_weight_max(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids")
    parent = "/kubepods/poduid1"
    assert pod_cgroup.ensure(parent, PodCgroupConfig(1024, 20_000, 64 * MI), tmp_path) == []
    d = tmp_path / "kubepods/poduid1"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (tmp_path / "kubepods/cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (d / "cpu.weight").read_text() == "39" and (d / "cpu.max").read_text() == "20000 100000"
    assert (d / "memory.max").read_text() == str(64 * MI)
    pod_cgroup.ensure(parent, PodCgroupConfig(2, None, None), tmp_path)
    assert (d / "cpu.max").read_text() == "max 100000" and (d / "memory.max").read_text() == "max"


def test_resize_holds_old_and_new_until_the_containers_are_done(tmp_path):
    for controller in ("cpu", "memory"):
        (tmp_path / controller).mkdir()
    parent = "/kubepods/poduid1"
    pod_cgroup.ensure(parent, PodCgroupConfig(204, 20_000, 128 * MI), tmp_path)
    new = PodCgroupConfig(512, 50_000, 64 * MI)  # more CPU, less memory
    assert pod_cgroup.resize(parent, new, containers_done=False, root=tmp_path) == []
    assert pod_cgroup.current(parent, tmp_path) == PodCgroupConfig(512, 50_000, 128 * MI)
    assert pod_cgroup.resize(parent, new, containers_done=True, root=tmp_path) == []
    assert pod_cgroup.current(parent, tmp_path) == new


async def test_the_syncer_makes_the_pod_cgroup_before_the_sandbox(syncer, rt, store, node):
    p = pod(limits("200m", "64Mi"))
    with store.session() as s:
        s.add(DesiredPod(uid=p.uid, namespace="default", name="p", source="file", manifest=p.to_manifest()))
    await syncer.sync("uid1")
    cpu = node.cgroup_root / "cpu/kubepods/poduid1"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "20000"
    assert (node.cgroup_root / "memory/kubepods/poduid1/memory.limit_in_bytes").read_text() == str(64 * MI)
    assert rt.ops("run_podsandbox")


async def test_a_pod_for_another_os_is_rejected(syncer, rt, store):
    for uid, os in (("uid1", "windows"), ("uid2", "linux")):
        p = pod({}, os=os).model_copy(update={"metadata": pod({}).metadata.model_copy(update={"uid": uid})})
        with store.session() as s:
            s.add(DesiredPod(uid=uid, namespace="default", name=uid, source="api", manifest=p.to_manifest()))
        await syncer.sync(uid)
    with store.session() as s:
        windows, linux = s.get(DesiredPod, "uid1"), s.get(DesiredPod, "uid2")
        assert (windows.admitted, windows.rejection_reason) == (False, "PodOSNotSupported")
        assert windows.rejection_message == "Failed to admit pod as the OS field doesn't match node OS"
        assert linux.admitted


def test_downward_api_limits_of_a_container_without_are_the_pods():
    from shared.model.downward_api import resource_field
    p = pod({}, resources={"limits": {"cpu": "1250m", "memory": "64Mi"}})
    c = p.spec.containers[0]
    assert resource_field(p, c, {"resource": "limits.cpu"}, 2000, 4096 * MI) == "2"
    assert resource_field(p, c, {"resource": "limits.memory"}, 2000, 4096 * MI) == str(64 * MI)
    only_cpu = pod({}, resources={"limits": {"cpu": "1"}, "requests": {"cpu": "1"}})
    assert resource_field(only_cpu, only_cpu.spec.containers[0], {"resource": "limits.memory"}, 2000, 4096 * MI) \
        == str(4096 * MI), "no pod limit either: node allocatable"


def test_pod_pids_limit_goes_to_pids_max_and_a_resize_leaves_it(tmp_path):
    for controller in ("cpu", "memory", "pids"):
        (tmp_path / controller).mkdir()
    parent = "/kubepods/poduid1"
    config = pod_cgroup_config(pod(limits("200m", "64Mi")), pod_pids_limit=256)
    assert config.pids_limit == 256
    assert pod_cgroup.ensure(parent, config, tmp_path) == []
    pids_max = tmp_path / "pids/kubepods/poduid1/pids.max"
    assert pids_max.read_text() == "256"
    assert pod_cgroup.resize(parent, pod_cgroup_config(pod(limits("400m", "64Mi"))), True, tmp_path) == []
    assert pids_max.read_text() == "256"
    assert pod_cgroup_config(pod({}), pod_pids_limit=-1).pids_limit is None


def test_pod_pids_limit_is_a_config_field():
    from shared.config.settings import ConfigError, load_kubelet_config
    k, ignored = load_kubelet_config({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                                      "podPidsLimit": 512})
    assert k.pod_pids_limit == 512 and "podPidsLimit" not in ignored
    with pytest.raises((ConfigError, ValueError), match="podPidsLimit"):
        load_kubelet_config({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                             "podPidsLimit": -5})


async def test_qos_tiers_weigh_their_pods_requests(syncer, rt, store, node):
    burstable = pod({"requests": {"cpu": "500m"}})
    besteffort = pod({}).model_copy(update={"metadata": burstable.metadata.model_copy(update={"uid": "uid2"})})
    for p in (burstable, besteffort):
        with store.session() as s:
            s.add(DesiredPod(uid=p.uid, namespace="default", name=p.uid, source="file", manifest=p.to_manifest()))
        await syncer.sync(p.uid)
    tiers = node.cgroup_root / "cpu/kubepods"
    assert (tiers / "burstable/cpu.shares").read_text() == "512"
    assert (tiers / "besteffort/cpu.shares").read_text() == "2"
    with store.session() as s:
        s.get(DesiredPod, "uid1").deleting = True
    await syncer.sync("uid1")
    assert (tiers / "burstable/cpu.shares").read_text() == "2", "its last pod gone, the tier weighs nothing"


@pytest.mark.parametrize("v2", [False, True])
def test_pod_cgroups_of_no_pod_are_removed_when_empty(tmp_path, v2):
    if v2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    hierarchies = [tmp_path] if v2 else [tmp_path / "cpu", tmp_path / "memory"]
    for h in hierarchies:
        # (A real cgroup's files do not keep rmdir from it; these would, so the empty one has none.)
        (h / "kubepods/burstable/podgone/leftover-container").mkdir(parents=True)
        (h / "kubepods/besteffort/podbusy").mkdir(parents=True)
        (h / "kubepods/besteffort/podbusy/cgroup.procs").write_text("4242\n")
        (h / "kubepods/podkept").mkdir(parents=True)
        (h / "kubepods/not-a-pod").mkdir(parents=True)
    found = pod_cgroup.pod_cgroups(tmp_path)
    assert found == {"gone": "/kubepods/burstable/podgone", "busy": "/kubepods/besteffort/podbusy",
                     "kept": "/kubepods/podkept"}
    orphans = {uid: found[uid] for uid in ("gone", "busy")}
    assert pod_cgroup.remove_orphans(orphans, tmp_path, min_age=0) == ["/kubepods/burstable/podgone"]
    assert pod_cgroup.pod_cgroups(tmp_path) == {"busy": "/kubepods/besteffort/podbusy", "kept": "/kubepods/podkept"}
    assert all(not (h / "kubepods/burstable/podgone").exists() for h in hierarchies)


def test_a_hostile_directory_name_is_no_pod(tmp_path):
    (tmp_path / "cpu/kubepods/pod..%2f").mkdir(parents=True)
    (tmp_path / "cpu/kubepods/pod").mkdir(parents=True)
    assert pod_cgroup.pod_cgroups(tmp_path) == {}


@pytest.mark.parametrize("v2", [False, True])
def test_with_a_cgroup_root_the_pods_cgroups_are_below_it(tmp_path, v2):
    """cgroupRoot /custom: the pods' cgroup is /custom/kubepods; its tiers, the pods' cgroups and
    node allocatable's cap are there, and only there (v2: the controllers delegated down to it)."""
    from services.pod_sync.resources import pod_cgroup_parent
    from shared.config.settings import KubeletConfiguration
    from shared.host.cgroups import CgroupReader

    kubepods = KubeletConfiguration.model_validate({"cgroupRoot": "/custom"}).kubepods
    assert kubepods == "/custom/kubepods"
    if v2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
        (tmp_path / "custom").mkdir()
    else:
        for c in ("cpu", "cpuacct", "memory", "pids"):
            (tmp_path / c / "custom").mkdir(parents=True)
    p = pod(limits(requests={"cpu": "100m"}))
    parent = pod_cgroup_parent(p, qos_class(p), kubepods)
    assert parent == "/custom/kubepods/burstable/poduid1"
    assert pod_cgroup.ensure(parent, pod_cgroup_config(p), tmp_path) == []
    assert pod_cgroup.set_qos_tiers([p], tmp_path, kubepods=kubepods) == []
    assert pod_cgroup.enforce_pods_allocatable(2**30, 1500, tmp_path, kubepods=kubepods) == []
    cpu = tmp_path / "custom/kubepods" if v2 else tmp_path / "cpu/custom/kubepods"
    memory = tmp_path / "custom/kubepods" if v2 else tmp_path / "memory/custom/kubepods"
    assert (cpu / "burstable/poduid1").is_dir() and (cpu / "besteffort").is_dir()
    assert (memory / ("memory.max" if v2 else "memory.limit_in_bytes")).read_text() == str(2**30)
    if v2:
        assert (tmp_path / "custom/cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert not (tmp_path / "kubepods").exists() and not (tmp_path / "cpu/kubepods").exists()
    assert pod_cgroup.pod_cgroups(tmp_path, kubepods=kubepods) == {"uid1": parent}
    assert pod_cgroup.pod_cgroups(tmp_path) == {}, "the default root's /kubepods holds none of them"
    if not v2:
        (tmp_path / "cpuacct/custom/kubepods/burstable/poduid1").mkdir(parents=True)
    reader = CgroupReader(tmp_path, kubepods=kubepods)
    assert reader.kubepods() == "/custom/kubepods" and reader.pod_cgroup("uid1") == parent


def test_cpu_limits_are_quotas_of_the_cfs_quota_period(tmp_path):
    """cpuCFSQuotaPeriod 50ms: the container's and the pod's period is 50 000 µs and a limit is a
    quota of it; as the kubelet's MilliCPUToQuota, a quota is never below 1 ms."""
    p = pod(limits("200m", "64Mi"), limits("300m", "32Mi"))
    res = container_resources(p.spec.containers[0], qos_class(p), 4096 * MI, None, p, cpu_period=50_000)
    assert (res.cpu_period, res.cpu_quota) == (50_000, 10_000)
    assert container_resources(p.spec.containers[0], qos_class(p), 4096 * MI, None, p,
                               cpu_period=2_000).cpu_quota == 1_000, "400 µs is raised to the 1 ms floor"
    config = pod_cgroup_config(p, cpu_period=50_000)
    assert config == PodCgroupConfig(cpu_shares=512, cpu_quota=25_000, memory_limit=96 * MI, cpu_period=50_000)
    for controller in ("cpu", "memory"):
        (tmp_path / "v1" / controller).mkdir(parents=True)
    parent = "/kubepods/poduid1"
    assert pod_cgroup.ensure(parent, config, tmp_path / "v1") == []
    assert (tmp_path / "v1/cpu/kubepods/poduid1/cpu.cfs_period_us").read_text() == "50000"
    assert pod_cgroup.current(parent, tmp_path / "v1") == PodCgroupConfig(512, 25_000, 96 * MI, cpu_period=50_000)
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2/cgroup.controllers").write_text("cpu memory pids")
    assert pod_cgroup.ensure(parent, config, tmp_path / "v2") == []
    assert (tmp_path / "v2/kubepods/poduid1/cpu.max").read_text() == "25000 50000"
    assert pod_cgroup.current(parent, tmp_path / "v2").cpu_period == 50_000
    # A resize keeps the period.
    assert pod_cgroup.resize(parent, pod_cgroup_config(pod(limits("1", "64Mi")), cpu_period=50_000), True,
                             root=tmp_path / "v1") == []
    assert (tmp_path / "v1/cpu/kubepods/poduid1/cpu.cfs_quota_us").read_text() == "50000"
    assert (tmp_path / "v1/cpu/kubepods/poduid1/cpu.cfs_period_us").read_text() == "50000"
