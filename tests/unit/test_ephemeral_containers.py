"""Ephemeral containers (`kubectl debug`): started once in the pod's running sandbox, in the
target container's process namespace, never restarted; reported as ephemeralContainerStatuses;
refused in static pods and with the fields the API server forbids on them."""

from __future__ import annotations

import pytest
from cri_api.v1 import api_pb2 as cri

from services.pod_sync.static_source import ManifestInvalid, pod_from_file
from services.status_reporter.pod_status import compute_status
from shared.model.podspec import validate_pod
from shared.store import PodRuntime
from tests.unit.conftest import IMG
from tests.unit.test_syncer import manifest, want

DEBUGGER = {"name": "debugger", "image": IMG, "targetContainerName": "app", "stdin": True, "tty": True,
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}


def updated(version: str, **spec):
    """The pod as the API serves it after an update: another resourceVersion."""
    m = manifest(**spec).to_manifest()
    m["metadata"]["resourceVersion"] = version
    return validate_pod(m)


def runtime_row(store, uid="uid1"):
    with store.session() as s:
        row = s.get(PodRuntime, uid)
        return {"sandbox_ready": row.sandbox_ready, "pod_ip": row.pod_ip, "containers": row.containers}


async def test_an_added_ephemeral_container_starts_once_in_the_targets_process_namespace(syncer, rt, store):
    want(store, manifest())
    await syncer.sync("uid1")
    [app] = rt.running()
    want(store, updated("2", ephemeralContainers=[DEBUGGER]))  # the ephemeralcontainers subresource's update
    await syncer.sync("uid1")
    [debugger] = [c for c in rt.running() if c.metadata.name == "debugger"]
    config = rt.created_configs[debugger.id]
    ns = config.linux.security_context.namespace_options
    assert (ns.pid, ns.target_id) == (cri.TARGET, app.id)
    assert config.stdin and config.tty
    assert rt.container_sandbox[debugger.id] == rt.container_sandbox[app.id], "the pod's own sandbox"

    rt.exit_container(debugger.id, 0)
    await syncer.sync("uid1")
    await syncer.sync("uid1")
    assert [c.metadata.name for c in rt.running()] == ["app"], "an ephemeral container is never restarted"
    assert len([c for c in rt.containers.values() if c.metadata.name == "debugger"]) == 1

    status, _ = compute_status(manifest(ephemeralContainers=[DEBUGGER]), runtime_row(store), None)
    [eph] = status["ephemeralContainerStatuses"]
    assert eph["name"] == "debugger" and eph["state"]["terminated"]["exitCode"] == 0
    assert eph["ready"] is False and "started" not in eph and eph["restartCount"] == 0
    assert [c["name"] for c in status["containerStatuses"]] == ["app"]
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert conds["Ready"] == "True", "an ephemeral container does not count for the pod's readiness"
    assert status["phase"] == "Running"


async def test_without_a_target_or_with_a_shared_process_namespace_no_target_is_asked(syncer, rt, store):
    untargeted = {k: v for k, v in DEBUGGER.items() if k != "targetContainerName"}
    want(store, manifest(ephemeralContainers=[untargeted]))
    await syncer.sync("uid1")
    await syncer.sync("uid1")
    [debugger] = [c for c in rt.running() if c.metadata.name == "debugger"]
    assert rt.created_configs[debugger.id].linux.security_context.namespace_options.pid == cri.CONTAINER

    want(store, manifest(uid="uid2", shareProcessNamespace=True, ephemeralContainers=[DEBUGGER]))
    await syncer.sync("uid2")
    await syncer.sync("uid2")
    [shared] = [c for c in rt.running() if c.metadata.name == "debugger" and c.id != debugger.id]
    ns = rt.created_configs[shared.id].linux.security_context.namespace_options
    assert (ns.pid, ns.target_id) == (cri.POD, "")


async def test_a_new_sandbox_does_not_start_ephemeral_containers_before_the_pod_runs(syncer, rt, store):
    """As the kubelet: a sync that creates the sandbox starts only the pod's own containers; the
    ephemeral one follows on the next sync, once its target exists."""
    want(store, manifest(ephemeralContainers=[DEBUGGER]))
    await syncer.sync("uid1")
    assert [c.metadata.name for c in rt.running()] == ["app"]
    await syncer.sync("uid1")
    assert sorted(c.metadata.name for c in rt.running()) == ["app", "debugger"]


@pytest.mark.parametrize("field,value", [("ports", [{"containerPort": 80}]),
                                         ("readinessProbe", {"exec": {"command": ["true"]}}),
                                         ("lifecycle", {"postStart": {"exec": {"command": ["true"]}}}),
                                         ("resources", {"limits": {"cpu": "1"}}),
                                         ("restartPolicy", "Always")])
def test_fields_the_api_server_forbids_on_ephemeral_containers_are_refused(field, value):
    with pytest.raises(ManifestInvalid, match=f"ephemeralContainers.*{field}"):
        manifest(ephemeralContainers=[{**DEBUGGER, field: value}])


def test_a_target_that_is_not_a_container_of_the_pod_and_a_reused_name_are_refused():
    with pytest.raises(ManifestInvalid, match="targetContainerName: 'nope' is not a container of the pod"):
        manifest(ephemeralContainers=[{**DEBUGGER, "targetContainerName": "nope"}])
    with pytest.raises(ManifestInvalid, match="container name 'app' is used twice"):
        manifest(ephemeralContainers=[{**DEBUGGER, "name": "app"}])


def test_a_static_pod_may_not_have_ephemeral_containers(tmp_path):
    path = tmp_path / "debug.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: d}\nspec:\n"
                    f"  containers: [{{name: app, image: {IMG}}}]\n"
                    f"  ephemeralContainers: [{{name: debugger, image: {IMG}}}]\n")
    with pytest.raises(ManifestInvalid, match="spec.ephemeralContainers: Forbidden: cannot be set on create"):
        pod_from_file(path, "node1")
    assert validate_pod({"metadata": {"name": "d"}, "spec": {"containers": [{"name": "app", "image": IMG}]}})
