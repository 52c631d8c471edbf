"""securityContext.supplementalGroupsPolicy (GA in Kubernetes 1.35) as the kubelet 1.37 takes it:
Strict admitted only where the runtime says it applies it, the policy handed to the runtime for
the sandbox and every container, and the identity the runtime reports in the container status."""

from __future__ import annotations

import pytest
from cri_api.v1 import api_pb2 as cri

from services.pod_sync.node_health import NodeHealthWriter
from services.status_reporter.pod_status import compute_status
from shared.model.podspec import ManifestInvalid, validate_pod
from shared.store import DesiredPod
from shared.store.models import NodeHealth
from shared.store.runtime_status import runtime_keeps_groups_strict
from tests.unit.conftest import IMG
from tests.unit.test_syncer import manifest, observed, want


def _pod(uid="uid1", policy=None):
    sc = {"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000]}
    if policy is not None:
        sc["supplementalGroupsPolicy"] = policy
    return manifest(uid=uid, securityContext=sc, containers=[{"name": "app", "image": IMG}])


@pytest.mark.parametrize("policy, error", [
    ("strict", 'Unsupported value: "strict": supported values: "Merge", "Strict"'),
    ("Strict\nx", r'Unsupported value: "Strict\nx"'),
    (5, "supplementalGroupsPolicy"),
])
def test_a_policy_the_api_does_not_know_is_refused_naming_the_field(policy, error):
    with pytest.raises(ManifestInvalid) as exc:
        validate_pod({"metadata": {"name": "p", "uid": "u"}, "spec": {
            "securityContext": {"supplementalGroupsPolicy": policy}, "containers": [{"name": "c", "image": "i:1"}]}})
    assert error in str(exc.value) and "spec.securityContext.supplementalGroupsPolicy" in str(exc.value)


async def _record_runtime(rt, store):
    await NodeHealthWriter(rt, store, lambda: (True, "")).write_once()


async def test_strict_on_a_runtime_that_cannot_is_rejected_in_the_kubelets_words(syncer, rt, store):
    await _record_runtime(rt, store)  # containerd 1.x: no features reported
    for uid, policy in (("uid1", "Strict"), ("uid2", "Merge"), ("uid3", None)):
        want(store, _pod(uid, policy))
        await syncer.sync(uid)
    with store.session() as s:
        strict, merge, unset = (s.get(DesiredPod, u) for u in ("uid1", "uid2", "uid3"))
        assert (strict.admitted, strict.rejection_reason) == (False, "SupplementalGroupsPolicyNotSupported")
        assert strict.rejection_message == "SupplementalGroupsPolicy=Strict is not supported in this node"
        assert merge.admitted and unset.admitted
    assert [c.metadata.uid for c in rt.sandbox_configs.values()] == ["uid2", "uid3"], "no sandbox for the rejected"


async def test_strict_is_handed_to_the_runtime_that_applies_it(syncer, rt, store):
    rt.supplemental_groups_policy = True
    await _record_runtime(rt, store)
    want(store, _pod("uid1", "Strict"))
    await syncer.sync("uid1")
    [sandbox] = rt.sandbox_configs.values()
    [config] = rt.created_configs.values()
    assert sandbox.linux.security_context.supplemental_groups_policy == cri.Strict
    assert config.linux.security_context.supplemental_groups_policy == cri.Strict
    want(store, _pod("uid2", "Merge"))
    await syncer.sync("uid2")
    merged = next(c for c in rt.created_configs.values() if c is not config)
    assert merged.linux.security_context.supplemental_groups_policy == cri.Merge
    # The runtime's word on whom the process runs as reaches the container status.
    [app] = observed(store).containers
    assert app["user"] == {"linux": {"uid": 1000, "gid": 3000, "supplementalGroups": [4000]}}
    status, _ = compute_status(_pod("uid1", "Strict"), {"containers": observed(store).containers}, None)
    assert status["containerStatuses"][0]["user"] == app["user"]


async def test_a_runtime_that_reports_no_user_leaves_it_out(syncer, rt, store):
    want(store, _pod("uid1"))
    await syncer.sync("uid1")
    [app] = observed(store).containers
    assert "user" not in app
    status, _ = compute_status(_pod("uid1"), {"containers": observed(store).containers}, None)
    assert "user" not in status["containerStatuses"][0]


@pytest.mark.parametrize("features, strict", [
    ('{"supplementalGroupsPolicy": true}', True), ('{"supplementalGroupsPolicy": false}', False),
    ("", False), ('{"supplementalGroupsPolicy": "true"}', False), ("[true]", False), ("{nope", False)])
def test_the_runtime_features_are_read_from_the_store_trusting_nothing_else(features, strict):
    assert runtime_keeps_groups_strict(NodeHealth(runtime_features=features)) is strict
    assert runtime_keeps_groups_strict(None) is False
