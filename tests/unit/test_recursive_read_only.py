"""volumeMounts[].recursiveReadOnly (GA in Kubernetes 1.33) as the kubelet 1.37 takes it: the API
server's rules, the runtime asked for a recursive read-only mount only where its default handler
makes them, and the container status' volumeMounts."""

from __future__ import annotations

import json

import pytest

from services.status_reporter.pod_status import compute_status
from shared.model.podspec import ManifestInvalid, VolumeMount, validate_pod
from shared.model.recursive_read_only import RecursiveReadOnlyError, resolve, status_mode
from shared.store.models import NodeHealth
from shared.store.runtime_status import default_handler_makes_rro_mounts
from tests.unit.conftest import IMG
from tests.unit.test_syncer import manifest, observed, want
from tests.unit.test_user_namespaces import ready_volume


def _pod(*mounts):
    return validate_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "containers": [{"name": "c", "image": "i:1", "volumeMounts": list(mounts)}],
        "volumes": [{"name": "data", "emptyDir": {}}]}})


@pytest.mark.parametrize("mount, error", [
    ({"recursiveReadOnly": "Enabled"}, "recursiveReadOnly: Forbidden: may only be specified when readOnly is true"),
    ({"recursiveReadOnly": "IfPossible"}, "recursiveReadOnly: Forbidden: may only be specified when readOnly is true"),
    ({"readOnly": True, "recursiveReadOnly": "Enabled", "mountPropagation": "HostToContainer"},
     "recursiveReadOnly: Forbidden: may only be specified when mountPropagation is None or not specified"),
    ({"readOnly": True, "recursiveReadOnly": "enabled"},
     'Unsupported value: "enabled": supported values: "Disabled", "Enabled", "IfPossible"'),
    ({"readOnly": True, "recursiveReadOnly": "Enabled\n; rm -rf /"}, r'Unsupported value: "Enabled\n; rm -rf /"'),
    ({"readOnly": True, "recursiveReadOnly": 1}, "recursiveReadOnly"),
])
def test_the_api_servers_rules_refuse_the_pod_naming_the_field(mount, error):
    with pytest.raises(ManifestInvalid) as exc:
        _pod({"name": "data", "mountPath": "/d", **mount})
    assert error in str(exc.value)
    assert "spec.containers[0].volumeMounts[0]" in str(exc.value)


def test_disabled_and_unset_are_accepted_on_any_mount():
    p = _pod({"name": "data", "mountPath": "/a", "recursiveReadOnly": "Disabled"},
             {"name": "data", "mountPath": "/b", "readOnly": True, "recursiveReadOnly": "Enabled",
              "mountPropagation": "None"})
    assert [m.recursiveReadOnly for m in p.spec.containers[0].volumeMounts] == ["Disabled", "Enabled"]


@pytest.mark.parametrize("mode, supported, want_rro", [
    (None, True, False), ("Disabled", True, False),
    ("IfPossible", True, True), ("IfPossible", False, False),
    ("Enabled", True, True),
])
def test_resolved_as_the_kubelet_resolves_it(mode, supported, want_rro):
    m = VolumeMount(name="data", mountPath="/d", readOnly=True, recursiveReadOnly=mode)
    assert resolve(m, supported) is want_rro
    assert status_mode(m, supported) == ("Enabled" if want_rro else "Disabled")


def test_enabled_on_a_runtime_that_cannot_is_the_kubelets_error():
    m = VolumeMount(name="data", mountPath="/d", readOnly=True, recursiveReadOnly="Enabled")
    with pytest.raises(RecursiveReadOnlyError) as exc:
        resolve(m, False)
    assert str(exc.value) == 'volume "data" requested recursive read-only mode, but it is not supported by the runtime'
    assert status_mode(m, False) == "Disabled"


# -- pod-sync ------------------------------------------------------------------------------------

def _rro_pod(mode):
    return manifest(containers=[{"name": "app", "image": IMG, "volumeMounts": [
        {"name": "data", "mountPath": "/data", "readOnly": True, "recursiveReadOnly": mode},
        {"name": "data", "mountPath": "/rw"}]}], volumes=[{"name": "data", "emptyDir": {}}])


@pytest.mark.parametrize("mode, supported, want_rro", [
    ("Enabled", True, True), ("IfPossible", True, True), ("IfPossible", False, False), ("Disabled", True, False)])
async def test_the_runtime_is_asked_for_a_recursive_read_only_mount_only_where_it_makes_them(
        syncer, rt, store, settings, mode, supported, want_rro):
    rt.handlers = [("", supported, False)]
    want(store, _rro_pod(mode))
    ready_volume(settings)
    await syncer.sync("uid1")
    [config] = rt.created_configs.values()
    mounts = {m.container_path: m for m in config.mounts}
    assert (mounts["/data"].readonly, mounts["/data"].recursive_read_only) == (True, want_rro)
    assert (mounts["/rw"].readonly, mounts["/rw"].recursive_read_only) == (False, False)


async def test_enabled_on_a_runtime_that_cannot_holds_the_container_with_the_kubelets_words(syncer, rt, store,
                                                                                            settings):
    rt.handlers = [("", False, False)]
    want(store, _rro_pod("Enabled"))
    ready_volume(settings)
    await syncer.sync("uid1")
    assert rt.created_configs == {}
    [app] = observed(store).containers
    assert app["waiting_reason"] == "CreateContainerConfigError"
    assert app["waiting_message"] == ('failed to resolve recursive read-only mode: volume "data" requested recursive '
                                      'read-only mode, but it is not supported by the runtime')


async def test_a_pod_without_recursive_read_only_mounts_asks_the_runtime_nothing_more(syncer, rt, store, settings):
    want(store, manifest())
    await syncer.sync("uid1")
    assert rt.ops("status") == []


# -- status ----------------------------------------------------------------------------------------

def test_the_container_status_lists_every_mount_with_the_read_only_ones_mode():
    p = validate_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {
        "containers": [{"name": "c", "image": "i:1", "volumeMounts": [
            {"name": "data", "mountPath": "/rw"},
            {"name": "data", "mountPath": "/ro", "readOnly": True},
            {"name": "data", "mountPath": "/rro", "readOnly": True, "recursiveReadOnly": "IfPossible"}]},
            {"name": "plain", "image": "i:1"}],
        "volumes": [{"name": "data", "emptyDir": {}}]}})
    for supported, mode in ((True, "Enabled"), (False, "Disabled")):
        status, _ = compute_status(p, None, None, rro_supported=supported)
        c, plain = status["containerStatuses"]
        assert c["volumeMounts"] == [
            {"name": "data", "mountPath": "/rw"},
            {"name": "data", "mountPath": "/ro", "readOnly": True, "recursiveReadOnly": "Disabled"},
            {"name": "data", "mountPath": "/rro", "readOnly": True, "recursiveReadOnly": mode}]
        assert "volumeMounts" not in plain, "no mounts, no list (the kubelet's omitempty)"


@pytest.mark.parametrize("handlers, want_rro", [
    ([{"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}}], True),
    ([{"name": "", "features": {"recursiveReadOnlyMounts": False}}], False),
    ([{"name": "runc", "features": {"recursiveReadOnlyMounts": True}}], False),
    ([{"name": "", "features": {"recursiveReadOnlyMounts": "yes"}}], False),
    (["", 3, None], False),
    ({"name": ""}, False),
])
def test_the_status_writer_reads_the_default_handler_from_the_store_and_trusts_nothing_else(handlers, want_rro):
    assert default_handler_makes_rro_mounts(NodeHealth(runtime_handlers=json.dumps(handlers))) is want_rro
    assert default_handler_makes_rro_mounts(NodeHealth(runtime_handlers="{not json")) is False
    assert default_handler_makes_rro_mounts(None) is False
