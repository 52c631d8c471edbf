"""Sync decisions against the recording fake runtime and a real SQLite store."""

import pytest
from cri_api.v1 import api_pb2 as cri

from shared.model.podspec import validate_pod
from shared.store import DesiredPod, NetworkStatus, PodRuntime, Store
from tests.unit.conftest import IMG


def manifest(uid="uid1", restart="Always", containers=None, grace=30, **spec):
    containers = containers or [{"name": "app", "image": IMG}]
    return validate_pod({"metadata": {"name": "p", "uid": uid},
                         "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": grace,
                                  "containers": containers, **spec}})


def want(store, pod, deleting=False):
    with store.session() as s:
        s.merge(DesiredPod(uid=pod.uid, namespace="default", name="p", source="file",
                           manifest=pod.to_manifest(), deleting=deleting,
                           grace_period_seconds=pod.spec.terminationGracePeriodSeconds))


def observed(store, uid="uid1"):
    with store.session() as s:
        return s.get(PodRuntime, uid)


async def test_new_pod_gets_sandbox_and_containers(syncer, rt, store, settings):
    pod = manifest(containers=[{"name": "a", "image": IMG}, {"name": "b", "image": IMG}])
    want(store, pod)
    await syncer.sync("uid1")
    ops = [op for op, _ in rt.ops("run_podsandbox", "create_container", "start_container")]
    assert ops[0] == "run_podsandbox"  # the sandbox first, then containers (in parallel)
    assert sorted(ops[1:]) == ["create_container"] * 2 + ["start_container"] * 2
    [sid] = rt.sandboxes
    cfg = rt.sandbox_configs[sid]
    assert cfg.labels["io.kubernetes.pod.uid"] == "uid1"
    assert cfg.log_directory == f"{settings.kubelet.pod_logs_dir}/default_p_uid1"
    assert sorted(c.log_path for c in rt.containers.values()) == ["a/0.log", "b/0.log"]
    row = observed(store)
    assert row.sandbox_ready and row.pod_ip.startswith("10.88.0.")
    assert [(c["name"], c["state"], c["restart_count"]) for c in row.containers] == \
        [("a", "running", 0), ("b", "running", 0)]


async def test_sync_of_a_running_pod_changes_nothing(syncer, rt, store):
    want(store, manifest())
    await syncer.sync("uid1")
    before = len(rt.calls)
    await syncer.sync("uid1")
    mutating = [op for op, _ in rt.calls[before:] if op not in
                ("list_podsandbox", "list_containers", "container_status", "podsandbox_status")]
    assert mutating == []


async def test_a_resync_that_finds_the_pod_as_it_was_writes_nothing(syncer, rt, store):
    want(store, manifest())
    await syncer.sync("uid1")
    written = observed(store).updated_at
    await syncer.sync("uid1")
    assert observed(store).updated_at == written
    [running] = rt.running()
    await rt.stop_container(running.id, 0)  # what the runtime has changed: the row follows
    await syncer.sync("uid1")
    row = observed(store)
    assert row.updated_at > written
    assert row.containers[0]["restart_count"] == 1


async def test_crashing_container_restarts_then_backs_off(syncer, rt, store):
    want(store, manifest())
    await syncer.sync("uid1")
    [cid] = rt.containers
    rt.exit_container(cid, 1)
    await syncer.sync("uid1")  # first restart is immediate
    running = rt.running()
    assert len(running) == 1 and running[0].metadata.attempt == 1
    rt.exit_container(running[0].id, 1)
    result = await syncer.sync("uid1")
    assert rt.running() == []
    [app] = observed(store).containers
    assert app["waiting_reason"] == "CrashLoopBackOff"
    assert "back-off 10s restarting failed container=app" in app["waiting_message"]
    assert app["last_terminated"]["exit_code"] == 1
    assert 0 < result.requeue_after <= 10


async def test_a_new_image_starts_without_the_old_images_back_off(syncer, rt, store):
    want(store, manifest())
    await syncer.sync("uid1")
    for _ in range(2):  # a restart, then back-off
        [running] = rt.running()
        rt.exit_container(running.id, 1)
        await syncer.sync("uid1")
    assert rt.running() == [] and observed(store).containers[0]["waiting_reason"] == "CrashLoopBackOff"
    updated = manifest(containers=[{"name": "app", "image": "reg/app:2"}])
    updated.metadata.resourceVersion = "2"  # an API pod's update
    want(store, updated)
    await syncer.sync("uid1")  # the kubelet keys back-off by container name and image
    [running] = rt.running()
    assert running.metadata.attempt == 2 and observed(store).containers[0]["image"] == "reg/app:2"
    rt.exit_container(running.id, 1)
    await syncer.sync("uid1")  # its back-off starts at the beginning
    assert rt.running() == []
    assert "back-off 10s restarting" in observed(store).containers[0]["waiting_message"]


@pytest.mark.parametrize("policy,code,restarted", [("Never", 1, False), ("Never", 0, False),
                                                   ("OnFailure", 0, False), ("OnFailure", 3, True),
                                                   ("Always", 0, True)])
async def test_restart_policy(syncer, rt, store, policy, code, restarted):
    want(store, manifest(restart=policy))
    await syncer.sync("uid1")
    [cid] = rt.containers
    rt.exit_container(cid, code)
    await syncer.sync("uid1")
    assert bool(rt.running()) == restarted
    if not restarted:  # a finished pod gives its sandbox (and IP) back
        assert all(s.state == cri.SANDBOX_NOTREADY for s in rt.sandboxes.values())
        await syncer.sync("uid1")
        assert len(rt.sandboxes) == 1, "a finished pod must not get a new sandbox"


async def test_dead_sandbox_is_replaced_with_all_containers(syncer, rt, store):
    want(store, manifest())
    await syncer.sync("uid1")
    [sid] = rt.sandboxes
    await rt.stop_pod_sandbox(sid)
    await syncer.sync("uid1")
    ready = [s for s in rt.sandboxes.values() if s.state == cri.SANDBOX_READY]
    assert len(ready) == 1 and ready[0].metadata.attempt == 1
    assert rt.running()[0].metadata.attempt == 1


async def test_deleted_pod_is_stopped_with_its_grace_period_and_forgotten(syncer, rt, store):
    pod = manifest(grace=7)
    want(store, pod)
    await syncer.sync("uid1")
    want(store, pod, deleting=True)
    result = await syncer.sync("uid1")
    assert result.gone
    assert [op for op, _ in rt.ops("stop_container")] == ["stop_container"]
    assert rt.containers == {} and rt.sandboxes == {}
    assert observed(store) is None
    with store.session() as s:
        assert s.get(DesiredPod, "uid1") is None


async def test_orphan_in_runtime_is_removed(syncer, rt, store):
    want(store, manifest())
    await syncer.sync("uid1")
    with store.session() as s:  # the desire vanished (e.g. state lost) but the runtime has it
        s.delete(s.get(DesiredPod, "uid1"))
    await syncer.sync("uid1")
    assert rt.containers == {} and rt.sandboxes == {}


async def test_image_pull_failure_then_back_off(syncer, rt, store):
    rt.pull_errors["reg/missing:1"] = "not found"
    want(store, manifest(containers=[{"name": "app", "image": "reg/missing:1"}]))
    r1 = await syncer.sync("uid1")
    assert observed(store).containers[0]["waiting_reason"] == "ErrImagePull"
    assert r1.requeue_after
    await syncer.sync("uid1")
    app = observed(store).containers[0]
    assert app["waiting_reason"] == "ImagePullBackOff"
    # As the kubelet 1.37: the back-off says why the last pull failed.
    assert app["waiting_message"] == ('Back-off pulling image "reg/missing:1": '
                                      'ErrImagePull: Failed to pull image "reg/missing:1": not found')
    assert len(rt.ops("pull_image")) == 1


async def test_never_pull_policy(syncer, rt, store):
    want(store, manifest(containers=[{"name": "app", "image": "reg/absent:1", "imagePullPolicy": "Never"}]))
    await syncer.sync("uid1")
    assert observed(store).containers[0]["waiting_reason"] == "ErrImageNeverPull"
    assert rt.ops("pull_image") == []


async def test_same_image_pulled_once_for_many_containers(syncer, rt, store):
    img = "reg/shared:1"
    want(store, manifest(containers=[{"name": f"c{i}", "image": img} for i in range(3)]))
    await syncer.sync("uid1")
    assert len(rt.ops("pull_image")) == 1
    assert len(rt.running()) == 3


async def test_network_not_ready_holds_the_sandbox(syncer, rt, store, settings):
    net = Store(settings.store_path, writer="network")
    with net.session() as s:
        s.merge(NetworkStatus(id=1, ready=False, message="no CNI config"))
    want(store, manifest())
    await syncer.sync("uid1")
    assert rt.sandboxes == {}
    row = observed(store)
    assert row.sync_error_reason == "NetworkNotReady" and "no CNI config" in row.sync_error_message


async def test_a_runtime_on_another_cgroup_driver_gets_no_sandbox_and_the_pod_says_why(syncer, rt, store):
    rt.runtime_cgroup_driver = "systemd"  # the node's config says cgroupfs
    want(store, manifest())
    await syncer.sync("uid1")
    assert rt.sandboxes == {}
    row = observed(store)
    assert row.sync_error_reason == "FailedCreatePodSandBox"
    assert row.sync_error_message.startswith("the node's cgroupDriver is cgroupfs but the container runtime uses "
                                             "systemd: make them match (containerd: SystemdCgroup = false")


async def test_host_network_pod_does_not_wait_for_the_network(syncer, rt, store, settings):
    net = Store(settings.store_path, writer="network")
    with net.session() as s:
        s.merge(NetworkStatus(id=1, ready=False, message="no CNI config"))
    want(store, manifest(hostNetwork=True))
    await syncer.sync("uid1")
    assert len(rt.running()) == 1


async def test_init_containers_run_in_order_before_app(syncer, rt, store):
    want(store, manifest(initContainers=[{"name": "i1", "image": IMG}, {"name": "i2", "image": IMG}]))
    await syncer.sync("uid1")
    assert [c.metadata.name for c in rt.running()] == ["i1"]
    rt.exit_container(rt.running()[0].id, 0)
    await syncer.sync("uid1")
    assert [c.metadata.name for c in rt.running()] == ["i2"]
    rt.exit_container(rt.running()[0].id, 0)
    await syncer.sync("uid1")
    assert [c.metadata.name for c in rt.running()] == ["app"]


async def test_env_field_refs(syncer, rt, store):
    want(store, manifest(containers=[{"name": "app", "image": IMG, "env": [
        {"name": "A", "value": "x"},
        {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]))
    await syncer.sync("uid1")
    [c] = rt.running()
    cfg_envs = {kv.key: kv.value for kv in _container_config(rt, c.id).envs}
    assert cfg_envs["A"] == "x" and cfg_envs["NAME"] == "p" and cfg_envs["IP"].startswith("10.88.0.")


def _container_config(rt, cid):
    return rt.created_configs[cid]


async def test_events_tell_the_story(syncer, rt, store, events):
    rt.pull_errors["reg/missing:1"] = "not found"
    want(store, manifest(containers=[{"name": "app", "image": IMG, "imagePullPolicy": "Always"}]))
    await syncer.sync("uid1")
    assert events.reasons() == ["Pulling", "Pulled", "Created", "Started"]
    assert events.events[1][2].startswith('Successfully pulled image "reg/app:1" in ')
    want(store, manifest(containers=[{"name": "app", "image": IMG}]), deleting=True)
    await syncer.sync("uid1")
    assert events.events[-1] == ("Normal", "Killing", "Stopping container app")


def _volume_pod():
    return manifest(containers=[{"name": "app", "image": IMG, "volumeMounts": [
        {"name": "cfg", "mountPath": "/etc/cfg"}, {"name": "data", "mountPath": "/data", "subPath": "app"},
        {"name": "data", "mountPath": "/ro", "readOnly": True}]}],
        volumes=[{"name": "cfg", "downwardAPI": {"items": []}}, {"name": "data", "emptyDir": {}}])


def _volume_rows(settings, **data_row):
    from shared.store import PodVolume
    vol = Store(settings.store_path, writer="volume")
    with vol.session() as s:
        s.merge(PodVolume(pod_uid="uid1", name="cfg", plugin="kubernetes.io/downward-api", host_path="/v/cfg",
                          ready=True))
        s.merge(PodVolume(pod_uid="uid1", name="data", plugin="kubernetes.io/empty-dir",
                          **{"host_path": "/v/data", "ready": True, **data_row}))


async def test_containers_wait_for_their_volumes(syncer, rt, store, settings):
    want(store, _volume_pod())
    await syncer.sync("uid1")
    assert rt.sandboxes == {} and rt.containers == {}, "nothing starts before the volume service reports"
    row = observed(store)
    assert row.sync_error_reason == "ContainerCreating" and "[cfg, data]" in row.sync_error_message

    _volume_rows(settings, ready=False, reason="FailedMount", message='MountVolume.SetUp failed for volume "data" : x')
    await syncer.sync("uid1")
    assert rt.sandboxes == {}
    row = observed(store)
    assert row.sync_error_reason == "FailedMount" and 'volume "data"' in row.sync_error_message


async def test_ready_volumes_become_cri_mounts(syncer, rt, store, settings):
    want(store, _volume_pod())
    _volume_rows(settings)
    await syncer.sync("uid1")
    [config] = rt.created_configs.values()
    mounts = {m.container_path: (m.host_path, m.readonly, m.propagation) for m in config.mounts}
    assert mounts["/etc/cfg"] == ("/v/cfg", True, cri.PROPAGATION_PRIVATE), "downwardAPI is always read-only"
    assert mounts["/data"] == ("/v/data/app", False, cri.PROPAGATION_PRIVATE), "subPath mounts its own bind mount"
    assert mounts["/ro"] == ("/v/data", True, cri.PROPAGATION_PRIVATE)
    assert syncer.subpaths.requests == [("uid1", "data", 1, "app")], "volumeMounts[1] of app"
    assert "/dev/termination-log" in mounts


async def test_the_termination_log_is_mounted_last_over_a_volume_at_its_path(syncer, rt, store, settings):
    # A volume at the terminationMessagePath (the API allows it) lies under the termination log:
    # the file the container writes and pod-sync reads back is pykubelet's own.
    want(store, manifest(containers=[{"name": "app", "image": IMG, "volumeMounts": [
        {"name": "data", "mountPath": "/dev/termination-log", "subPath": "msg"}]}],
        volumes=[{"name": "data", "emptyDir": {}}]))
    _volume_rows(settings)
    await syncer.sync("uid1")
    [config] = rt.created_configs.values()
    at_path = [m.host_path for m in config.mounts if m.container_path == "/dev/termination-log"]
    assert at_path[0] == "/v/data/msg" and at_path[-1].endswith("/containers/app/0.termination-log"), at_path
    assert config.mounts[-1].host_path == at_path[-1]


async def test_a_subpath_that_cannot_be_mounted_safely_fails_the_container_start(syncer, rt, store, settings):
    want(store, _volume_pod())
    _volume_rows(settings)
    syncer.subpaths.refuse["app"] = "'app': resolves outside the volume"
    await syncer.sync("uid1")
    assert rt.created_configs == {}
    row = observed(store)
    [app] = row.containers
    assert app["waiting_reason"] == "CreateContainerConfigError"
    assert 'failed to prepare subPath for volumeMount "data" of container "app"' in app["waiting_message"]


async def test_termination_message_file_is_writable_by_any_user(syncer, rt, store):
    # e2e "should report termination message ... as non-root user and at a non-default path"
    want(store, manifest(containers=[{"name": "app", "image": IMG, "terminationMessagePath": "/dev/custom-log",
                                      "securityContext": {"runAsUser": 1000}}]))
    await syncer.sync("uid1")
    [config] = rt.created_configs.values()
    host = next(m.host_path for m in config.mounts if m.container_path == "/dev/custom-log")
    import os

    assert os.stat(host).st_mode & 0o777 == 0o666


async def test_a_defect_building_a_container_config_is_shown_on_the_pod(syncer, rt, store, events, monkeypatch):
    import services.pod_sync.syncer as syncer_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(syncer_module, "container_config", broken)
    want(store, manifest())
    result = await syncer.sync("uid1")
    assert result.requeue_after is not None, "retried"
    [c] = observed(store).containers
    assert c["waiting_reason"] == "CreateContainerConfigError"
    assert c["waiting_message"] == ("internal error building the container config: "
                                    "ZeroDivisionError: float division by zero")
    assert ("Warning", "Failed", "Error: " + c["waiting_message"]) in events.events


async def test_a_pod_selecting_the_nodes_labels_is_admitted(syncer, rt, store, node):
    """--node-labels count for admission as the node's own labels do (nodeSelector here)."""
    import dataclasses

    syncer.node = dataclasses.replace(node, labels={"example.com/pool": "blue"})
    want(store, manifest(nodeSelector={"example.com/pool": "blue"}))
    want(store, manifest(uid="uid2", nodeSelector={"example.com/pool": "green"}))
    await syncer.sync("uid1")
    await syncer.sync("uid2")
    assert observed(store, "uid1").sandbox_ready
    with store.session() as s:
        rejected = s.get(DesiredPod, "uid2")
    assert rejected.rejection_reason == "NodeAffinity"
    assert len(rt.sandboxes) == 1, "only the admitted pod has a sandbox"
