"""A container's own restartPolicy and restartPolicyRules (ContainerRestartRules, on by default
since Kubernetes 1.35), as the kubelet 1.37 takes them: the API server's rules, who restarts,
and the pod's phase. The cases of the e2e spec "Pod Extended (container restart policy)" first."""

from __future__ import annotations

import pytest
from cri_api.v1 import api_pb2 as cri

from services.status_reporter.pod_status import compute_status
from shared.model import restart_rules
from shared.model.podspec import ManifestInvalid, validate_pod
from tests.unit.conftest import IMG
from tests.unit.test_syncer import manifest, observed, want


def rule(operator, *values, action="Restart"):
    return {"action": action, "exitCodes": {"operator": operator, "values": list(values)}}


def app(policy=None, rules=(), name="app"):
    c = {"name": name, "image": IMG}
    if policy is not None:
        c["restartPolicy"] = policy
    if rules:
        c["restartPolicyRules"] = list(rules)
    return c


# pod policy, container policy, rules, exit code, restarted (the e2e spec's five, then more)
CASES = [
    ("Never", "Never", [rule("In", 42)], 42, True),       # should restart container on rule match
    ("Never", "Never", [rule("In", 42)], 1, False),       # should not restart on rule mismatch
    ("Always", "Never", [], 1, False),                    # container-level Never over pod Always
    ("Never", "Always", [], 1, True),                     # container-level Always over pod Never
    ("Always", None, [], 1, True),                        # pod-level Always without container policy
    ("Never", "OnFailure", [], 0, False), ("Never", "OnFailure", [], 3, True),
    ("Always", "Never", [rule("NotIn", 0, 1)], 7, True), ("Always", "Never", [rule("NotIn", 0, 1)], 1, False),
    ("Never", "Never", [rule("In", 1), rule("In", 2)], 2, True),
]


@pytest.mark.parametrize("pod_policy, policy, rules, code, restarted", CASES)
def test_the_kubelets_decision(pod_policy, policy, rules, code, restarted):
    pod = manifest(restart=pod_policy, containers=[app(policy, rules)])
    assert restart_rules.should_restart(pod, pod.spec.containers[0], code) is restarted


@pytest.mark.parametrize("pod_policy, policy, rules, code, restarted", CASES)
async def test_pod_sync_restarts_by_them(syncer, rt, store, pod_policy, policy, rules, code, restarted):
    want(store, manifest(restart=pod_policy, containers=[app(policy, rules)]))
    await syncer.sync("uid1")
    [cid] = rt.containers
    rt.exit_container(cid, code)
    await syncer.sync("uid1")
    assert bool(rt.running()) == restarted
    if restarted:
        assert rt.running()[0].metadata.attempt == 1
    else:  # nothing runs again: the pod is done and gives its sandbox back
        assert all(s.state == cri.SANDBOX_NOTREADY for s in rt.sandboxes.values())


def _status(pod, state):
    return compute_status(pod, {"sandbox_ready": True, "pod_ip": "10.88.0.5", "containers": [state]}, None)[0]


def _exited(code, waiting=""):
    return {"name": "app", "state": "exited", "exit_code": code, "reason": "Error" if code else "Completed",
            "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:05Z", "restart_count": 0,
            "container_id": "containerd://abc", "waiting_reason": waiting, "last_terminated": None}


@pytest.mark.parametrize("pod_policy, policy, rules, code, phase", [
    ("Never", "Always", [], 1, "Running"),             # on its way back, whatever the pod's Never
    ("Never", "Never", [rule("In", 42)], 42, "Running"),
    ("Never", "Never", [rule("In", 42)], 1, "Failed"),
    ("Always", "Never", [], 1, "Failed"),              # the pod's Always does not bring it back
    ("Always", "Never", [], 0, "Succeeded"),
    ("Always", None, [], 1, "Running"), ("OnFailure", None, [], 0, "Succeeded"), ("Never", None, [], 1, "Failed"),
])
def test_the_phase_counts_only_containers_that_do_not_run_again(pod_policy, policy, rules, code, phase):
    pod = manifest(restart=pod_policy, containers=[app(policy, rules)])
    assert _status(pod, _exited(code))["phase"] == phase
    if phase == "Running":  # the same while it waits out its back-off
        assert _status(pod, {**_exited(code), "waiting_reason": "CrashLoopBackOff"})["phase"] == "Running"


async def _init_container_fails(syncer, rt, store, pod_policy, init_policy):
    """The pod's only init container exits 1; the pod as synced once more."""
    pod = manifest(restart=pod_policy, containers=[app()], initContainers=[app(init_policy, name="init")])
    want(store, pod)
    await syncer.sync("uid1")
    [cid] = rt.containers
    rt.exit_container(cid, 1)
    await syncer.sync("uid1")
    return pod


async def test_an_init_container_that_fails_and_does_not_run_again_fails_the_pod(syncer, rt, store):
    pod = await _init_container_fails(syncer, rt, store, "Always", "Never")
    assert rt.running() == [] and all(s.state == cri.SANDBOX_NOTREADY for s in rt.sandboxes.values())
    status = compute_status(pod, {"sandbox_ready": False, "containers": observed(store).containers}, None)[0]
    assert status["phase"] == "Failed"


async def test_an_init_container_of_its_own_on_failure_runs_again_in_a_never_pod(syncer, rt, store):
    await _init_container_fails(syncer, rt, store, "Never", "OnFailure")
    [again] = rt.running()
    assert again.metadata.name == "init" and again.metadata.attempt == 1


@pytest.mark.parametrize("container, where, error", [
    (app(rules=[rule("In", 1)]), "containers", "containers[0].restartPolicy: Required value: must specify "
                                               "restartPolicy when restart rules are used"),
    (app("Never", [rule("In", 1, action="Kill")]), "containers", 'Unsupported value: "Kill": supported values: '
                                                                 '"Restart", "RestartAllContainers"'),
    (app("Never", [{"action": "Restart"}]), "containers", "exitCodes: Required value: must be specified"),
    (app("Never", [rule("Between", 1)]), "containers", "operator"),
    (app("Never", [rule("In", 1)] * 21), "containers", "restartPolicyRules"),
    (app("Never", [rule("In", *range(256))]), "containers", "values"),
    (app("Sometimes"), "containers", "restartPolicy"),
])
def test_the_api_servers_rules(container, where, error):
    spec = {"containers": [app()] if where == "initContainers" else [container]}
    if where == "initContainers":
        spec["initContainers"] = [container]
    with pytest.raises(ManifestInvalid) as exc:
        validate_pod({"metadata": {"name": "p", "uid": "u"}, "spec": spec})
    assert error in str(exc.value)


def test_an_ephemeral_container_has_no_restart_rules():
    with pytest.raises(ManifestInvalid) as exc:
        validate_pod({"metadata": {"name": "p", "uid": "u"}, "spec": {
            "containers": [app()], "ephemeralContainers": [{"name": "dbg", "image": IMG,
                                                            "restartPolicyRules": [rule("In", 1)]}]}})
    assert "restartPolicyRules: ephemeral containers may not have restart rules" in str(exc.value)


def test_restart_all_containers_is_an_action_of_every_kind_of_container():
    """With RestartAllContainersOnContainerExits (on by default since 1.36) the API server takes
    it on app, init and sidecar containers."""
    pod = validate_pod({"metadata": {"name": "p", "uid": "u"}, "spec": {
        "containers": [app("Never", [rule("In", 42, action="RestartAllContainers")])],
        "initContainers": [app("Always", [rule("In", 42, action="RestartAllContainers")], name="side")]}})
    assert restart_rules.could_restart_all(pod)
    assert restart_rules.restarts_all(pod.spec.containers[0], 42)
    assert not restart_rules.restarts_all(pod.spec.containers[0], 1)
    assert restart_rules.should_restart(pod, pod.spec.containers[0], 42), "the source runs again too"


ALL = [rule("In", 42, action="RestartAllContainers")]


def _by_name(rt):
    return {c.metadata.name: c for c in rt.running()}


async def test_restart_all_containers_stops_every_container_and_runs_them_again_from_the_first_init(
        syncer, rt, store, events):
    """The e2e spec's first case: in a Never pod, the app container that exits 42 restarts the
    init container, the sidecar and the other app container, each once."""
    pod = manifest(restart="Never", containers=[app("Never", ALL, name="source"), app(name="regular")],
                   initContainers=[app(name="init"), app("Always", name="sidecar")])
    want(store, pod)
    await syncer.sync("uid1")
    [init] = rt.running()
    rt.exit_container(init.id, 0)
    for _ in range(3):
        await syncer.sync("uid1")
    first = _by_name(rt)
    assert set(first) == {"sidecar", "source", "regular"}
    rt.exit_container(first["source"].id, 42)
    await syncer.sync("uid1")
    # every container stopped; the first init container runs again
    assert [c.metadata.name for c in rt.running()] == ["init"]
    assert rt.running()[0].metadata.attempt == 1
    waiting = {c["name"]: c["waiting_reason"] for c in observed(store).containers}
    assert waiting["regular"] == waiting["sidecar"] == waiting["source"] == "RestartingAllContainers"
    status = compute_status(pod, {"sandbox_ready": True, "containers": observed(store).containers}, None)[0]
    assert status["phase"] != "Failed", "on their way back, whatever the pod's Never"
    [cond] = [c for c in status["conditions"] if c["type"] == "AllContainersRestarting"]
    assert (cond["status"], cond["reason"]) == ("True", "RestartAllContainersStarted")
    [again] = rt.running()
    rt.exit_container(again.id, 0)
    for _ in range(3):
        await syncer.sync("uid1")
    second = _by_name(rt)
    assert {n: c.metadata.attempt for n, c in second.items()} == {"sidecar": 1, "source": 1, "regular": 1}
    status = compute_status(pod, {"sandbox_ready": True, "containers": observed(store).containers}, None)[0]
    assert status["phase"] == "Running"
    [cond] = [c for c in status["conditions"] if c["type"] == "AllContainersRestarting"]
    assert cond["status"] == "False"
    restarted = {c["name"]: c["restart_count"] for c in observed(store).containers}
    assert restarted == {"init": 1, "sidecar": 1, "source": 1, "regular": 1}
    # the source, now running, does not loop: nothing restarts again
    await syncer.sync("uid1")
    assert {n: c.id for n, c in _by_name(rt).items()} == {n: c.id for n, c in second.items()}
