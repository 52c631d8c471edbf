"""In-place pod resize in pod-sync: allocation, in-place updates, restarts by resizePolicy and the
resize conditions, against the recording fake runtime and a real SQLite store."""

import json

from services.pod_sync.resize import created_with
from shared.model.allocation import POD_LEVEL, changed, effective, same, spec_allocation, with_allocation
from shared.model.podspec import validate_pod
from shared.store import DesiredPod, PodRuntime
from tests.unit.conftest import IMG


def pod(cpu="100m", memory="64Mi", cpu_limit=None, memory_limit=None, generation=1, policy=None,
        restart="Always", uid="uid1", name="p"):
    resources = {"requests": {"cpu": cpu, "memory": memory},
                 "limits": {k: v for k, v in (("cpu", cpu_limit), ("memory", memory_limit)) if v}}
    container = {"name": "app", "image": IMG, "resources": resources}
    if policy:
        container["resizePolicy"] = [{"resourceName": r, "restartPolicy": p} for r, p in policy.items()]
    # A new resourceVersion with every change, as the API server gives (the pod cache keys on it).
    return validate_pod({"metadata": {"name": name, "uid": uid, "generation": generation,
                                      "resourceVersion": f"{generation}{cpu}{memory}{cpu_limit}{memory_limit}"},
                         "spec": {"restartPolicy": restart, "containers": [container]}})


def want(store, p, source="api"):
    """The pod as the API source writes it: a new spec keeps the node's own columns."""
    with store.session() as s:
        row = s.get(DesiredPod, p.uid)
        if row is None:
            s.add(DesiredPod(uid=p.uid, namespace="default", name=p.metadata.name, source=source,
                             manifest=p.to_manifest()))
        else:
            row.manifest = p.to_manifest()


def runtime_row(store, uid="uid1"):
    with store.session() as s:
        return s.get(PodRuntime, uid)


def conditions(store, uid="uid1"):
    return {c["type"]: c for c in runtime_row(store, uid).resize_conditions}


def running_app(rt):
    [c] = [c for c in rt.running() if c.metadata.name == "app"]
    return c


def test_quantities_compare_by_value_not_spelling():
    a = spec_allocation(pod(cpu="1", memory="1Gi"))
    b = spec_allocation(pod(cpu="1000m", memory="1024Mi"))
    assert same(a, b)
    assert changed(a["app"], spec_allocation(pod(cpu="2", memory="1Gi"))["app"]) == {"cpu"}
    assert changed(a["app"], spec_allocation(pod(cpu="1", memory="1Gi", memory_limit="2Gi"))["app"]) == {"memory"}


def test_with_allocation_gives_containers_the_granted_resources():
    asked = pod(cpu="500m")
    granted = with_allocation(asked, spec_allocation(pod(cpu="100m")))
    assert granted.spec.containers[0].resources.requests["cpu"] == "100m"
    assert asked.spec.containers[0].resources.requests["cpu"] == "500m", "the spec itself is untouched"
    assert with_allocation(asked, spec_allocation(asked)) is asked


def test_created_with_refuses_what_it_cannot_read():
    assert created_with('{"requests":{"cpu":"1"},"limits":{}}') == {"requests": {"cpu": "1"}, "limits": {}}
    for bad in ("", "not json", "[]", '{"requests":"x"}', '{"requests":{"cpu":"lots"}}'):
        assert created_with(bad) is None, bad


async def test_containers_are_created_with_their_allocation_recorded(syncer, rt, store):
    want(store, pod(cpu="100m"))
    await syncer.sync("uid1")
    c = running_app(rt)
    assert json.loads(rt.created_configs[c.id].annotations["pykubelet.io/resources"]) == \
        {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {}}
    [entry] = runtime_row(store).containers
    assert entry["allocated"] == {"cpu": "100m", "memory": "64Mi"}
    assert entry["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"}}
    assert runtime_row(store).observed_generation == 1
    assert conditions(store) == {}


async def test_resize_that_fits_updates_the_running_container_in_place(syncer, rt, store, events):
    want(store, pod(cpu="100m", cpu_limit="200m"))
    await syncer.sync("uid1")
    before = running_app(rt)
    want(store, pod(cpu="300m", cpu_limit="400m", generation=2))
    await syncer.sync("uid1")
    after = running_app(rt)
    assert after.id == before.id and after.metadata.attempt == 0, "resized in place, not restarted"
    applied = rt.updated_resources[after.id]
    assert (applied.cpu_shares, applied.cpu_quota, applied.cpu_period) == (307, 40_000, 100_000)
    [entry] = runtime_row(store).containers
    assert entry["allocated"]["cpu"] == "300m"
    assert entry["resources"] == {"requests": {"cpu": "300m", "memory": "64Mi"}, "limits": {"cpu": "400m"}}
    assert conditions(store) == {}, "done in one sync: neither pending nor in progress"
    assert runtime_row(store).observed_generation == 2
    assert [r for r in events.reasons() if r.startswith("Resize")] == ["ResizeStarted", "ResizeCompleted"]
    started = next(m for _, r, m in events.events if r == "ResizeStarted")
    assert started.startswith("Pod resize started: ") and '"generation":2' in started
    # The next sync has nothing to do.
    calls = len(rt.ops("update_container_resources"))
    await syncer.sync("uid1")
    assert len(rt.ops("update_container_resources")) == calls


async def test_resize_beyond_the_node_is_infeasible_and_the_old_allocation_stays(syncer, rt, store, events):
    want(store, pod(cpu="100m"))
    await syncer.sync("uid1")
    want(store, pod(cpu="64", generation=2))  # the node has 2 cores
    await syncer.sync("uid1")
    pending = conditions(store)["PodResizePending"]
    assert pending["reason"] == "Infeasible" and pending["status"] == "True"
    assert pending["message"] == "Node didn't have enough capacity: cpu, requested: 64000, capacity: 2000"
    assert pending["observedGeneration"] == 2
    assert rt.ops("update_container_resources") == []
    [entry] = runtime_row(store).containers
    assert entry["allocated"]["cpu"] == "100m", "still running as allocated"
    assert "ResizeInfeasible" in events.reasons()
    # Asked back down: the pending condition goes.
    want(store, pod(cpu="100m", generation=3))
    await syncer.sync("uid1")
    assert conditions(store) == {}


async def test_resize_that_does_not_fit_beside_other_pods_is_deferred_until_they_go(syncer, rt, store):
    want(store, pod(uid="other", name="other", cpu="1500m"))
    await syncer.sync("other")
    want(store, pod(cpu="100m"))
    await syncer.sync("uid1")
    want(store, pod(cpu="1", generation=2))
    result = await syncer.sync("uid1")
    pending = conditions(store)["PodResizePending"]
    assert pending["reason"] == "Deferred"
    assert pending["message"] == "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
    assert result.requeue_after is not None, "a deferred resize is tried again"
    with store.session() as s:
        s.get(DesiredPod, "other").deleting = True
    await syncer.sync("other")
    await syncer.sync("uid1")
    assert conditions(store) == {}
    assert rt.updated_resources[running_app(rt).id].cpu_shares == 1024


async def test_static_pods_cannot_be_resized(syncer, rt, store):
    want(store, pod(cpu="100m"), source="file")
    await syncer.sync("uid1")
    want(store, pod(cpu="200m", generation=2), source="file")
    await syncer.sync("uid1")
    assert conditions(store)["PodResizePending"]["message"] == "In-place resize of static-pods is not supported"


async def test_restart_container_policy_restarts_only_for_that_resource(syncer, rt, store, events):
    want(store, pod(memory="64Mi", memory_limit="128Mi", policy={"memory": "RestartContainer"}))
    await syncer.sync("uid1")
    first = running_app(rt)
    want(store, pod(cpu="200m", memory="64Mi", memory_limit="128Mi", generation=2,
                    policy={"memory": "RestartContainer"}))
    await syncer.sync("uid1")
    assert running_app(rt).id == first.id, "cpu is NotRequired: updated in place"
    want(store, pod(cpu="200m", memory="64Mi", memory_limit="256Mi", generation=3,
                    policy={"memory": "RestartContainer"}))
    await syncer.sync("uid1")
    second = running_app(rt)
    assert second.id != first.id and second.metadata.attempt == 1, "memory needs a restart"
    assert rt.created_configs[second.id].linux.resources.memory_limit_in_bytes == 256 * 2**20
    assert ("Normal", "Killing", "Container app resize requires restart") in events.events
    assert conditions(store) == {}
    [entry] = runtime_row(store).containers
    assert entry["restart_count"] == 1 and entry["resources"]["limits"]["memory"] == "256Mi"


async def test_a_failed_update_shows_in_progress_with_the_error_and_is_retried(syncer, rt, store, events):
    want(store, pod(cpu="100m"))
    await syncer.sync("uid1")
    cid = running_app(rt).id
    rt.update_errors[cid] = "runc update: permission denied"
    want(store, pod(cpu="200m", generation=2))
    result = await syncer.sync("uid1")
    progress = conditions(store)["PodResizeInProgress"]
    assert progress["reason"] == "Error" and "runc update: permission denied" in progress["message"]
    assert "ResizeError" in events.reasons()
    assert result.requeue_after is not None
    [entry] = runtime_row(store).containers
    assert entry["allocated"]["cpu"] == "200m" and entry["resources"]["requests"]["cpu"] == "100m", \
        "granted, but the container still has the old resources"
    del rt.update_errors[cid]
    await syncer.sync("uid1")
    assert conditions(store) == {}
    assert runtime_row(store).containers[0]["resources"]["requests"]["cpu"] == "200m"


async def test_a_new_syncer_neither_forgets_a_grant_nor_repeats_an_update(syncer, rt, store, settings, node,
                                                                          events):
    from services.pod_sync.images import ImageManager
    from services.pod_sync.syncer import PodSyncer
    from shared.host.subpath import FakeSubPathMounts
    from shared.tasks.retry import Backoff

    want(store, pod(cpu="100m"))
    await syncer.sync("uid1")
    want(store, pod(cpu="200m", generation=2))
    await syncer.sync("uid1")
    updates = len(rt.ops("update_container_resources"))
    restarted = PodSyncer(rt, ImageManager(rt, Backoff(10, 300)), store, settings, Backoff(10, 300), node, events,
                          subpaths=FakeSubPathMounts())
    await restarted.sync("uid1")
    assert len(rt.ops("update_container_resources")) == updates
    assert runtime_row(store).containers[0]["allocated"]["cpu"] == "200m"


# -- pod-level resources (InPlacePodLevelResourcesVerticalScaling) ---------------------------------

def plr_pod(cpu_limit="400m", memory_limit="256Mi", generation=1, policy=None, own=None):
    """A pod with pod-level resources; its container sets none unless `own` says."""
    container = {"name": "app", "image": IMG, **({"resources": own} if own else {})}
    if policy:
        container["resizePolicy"] = [{"resourceName": r, "restartPolicy": p} for r, p in policy.items()]
    return validate_pod({"metadata": {"name": "p", "uid": "uid1", "generation": generation,
                                      "resourceVersion": f"{generation}{cpu_limit}{memory_limit}"},
                         "spec": {"containers": [container],
                                  "resources": {"requests": {"cpu": "200m", "memory": "128Mi"},
                                                "limits": {"cpu": cpu_limit, "memory": memory_limit}}}})


def test_the_allocation_holds_the_pod_level_resources_and_containers_take_their_limits():
    allocation = spec_allocation(plr_pod())
    assert allocation[POD_LEVEL] == {"requests": {"cpu": "200m", "memory": "128Mi"},
                                     "limits": {"cpu": "400m", "memory": "256Mi"}}
    assert effective(allocation["app"], allocation[POD_LEVEL]) == \
        {"requests": {}, "limits": {"cpu": "400m", "memory": "256Mi"}}
    own = spec_allocation(plr_pod(own={"limits": {"cpu": "100m"}}))
    assert effective(own["app"], own[POD_LEVEL])["limits"] == {"cpu": "100m", "memory": "256Mi"}, \
        "a container's own limit wins"
    granted = with_allocation(plr_pod(cpu_limit="1"), allocation)
    assert granted.spec.resources.limits["cpu"] == "400m", "the pod runs as allocated"


async def test_a_pod_level_limit_resize_reaches_the_container_that_takes_it_in_place(syncer, rt, store, events):
    want(store, plr_pod())
    await syncer.sync("uid1")
    first = running_app(rt)
    created = rt.created_configs[first.id]
    assert (created.linux.resources.cpu_quota, created.linux.resources.memory_limit_in_bytes) == (40_000, 256 * 2**20)
    want(store, plr_pod(cpu_limit="600m", generation=2))
    await syncer.sync("uid1")
    assert running_app(rt).id == first.id, "NotRequired: updated in place"
    assert rt.updated_resources[first.id].cpu_quota == 60_000
    assert conditions(store) == {}
    assert [r for r in events.reasons() if r.startswith("Resize")] == ["ResizeStarted", "ResizeCompleted"]
    row = runtime_row(store)
    assert row.pod_resources == {"allocatedResources": {"cpu": "200m", "memory": "128Mi"},
                                 "resources": {"requests": {"cpu": "200m", "memory": "128Mi"},
                                               "limits": {"cpu": "600m", "memory": "256Mi"}}}
    [entry] = row.containers
    assert entry["resources"] == {}, "the container's status shows only the limits it sets itself"


async def test_a_pod_level_memory_resize_restarts_the_container_its_policy_says(syncer, rt, store, events):
    policy = {"memory": "RestartContainer"}
    want(store, plr_pod(policy=policy))
    await syncer.sync("uid1")
    first = running_app(rt)
    want(store, plr_pod(memory_limit="384Mi", generation=2, policy=policy))
    await syncer.sync("uid1")
    second = running_app(rt)
    assert second.id != first.id and second.metadata.attempt == 1
    assert rt.created_configs[second.id].linux.resources.memory_limit_in_bytes == 384 * 2**20
    assert ("Normal", "Killing", "Container app resize requires restart") in events.events
    assert conditions(store) == {}


async def test_containers_are_not_restarted_without_a_granted_resize(syncer, rt, store):
    """A container whose recorded resources differ (made by an older pykubelet) but whose pod
    asked for no resize is left running."""
    policy = {"memory": "RestartContainer"}
    want(store, plr_pod(policy=policy))
    await syncer.sync("uid1")
    first = running_app(rt)
    rt.created_configs[first.id].annotations["pykubelet.io/resources"] = '{"requests":{},"limits":{}}'
    rt.containers[first.id].annotations["pykubelet.io/resources"] = '{"requests":{},"limits":{}}'
    await syncer.sync("uid1")
    assert running_app(rt).id == first.id


def test_a_memory_limit_below_usage_fails_the_resize_in_the_kubelets_words():
    from services.pod_sync.resize import MemoryLimitChange, memory_limits_below_usage
    assert memory_limits_below_usage([MemoryLimitChange("", 10240, 256 * 2**20, 5_000_000)]) == \
        "cannot decrease memory limits: attempting to set pod memory limit (10240) below current usage (5000000)"
    assert memory_limits_below_usage([MemoryLimitChange("", 10240, 256 * 2**20, 4096)]) == ""
    assert memory_limits_below_usage([MemoryLimitChange("app", 2**30, 2**20, None)]) == "", "raised: not checked"
    assert memory_limits_below_usage([MemoryLimitChange("", 10240, None, 20000),
                                      MemoryLimitChange("app", 10240, 2**20, None)]) == \
        ('cannot decrease memory limits: [attempting to set pod memory limit (10240) below current usage (20000), '
         'missing container "app" memory usage]')
