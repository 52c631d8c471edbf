"""Every field of a pod is implemented, refused with a reason naming it, or left to the component
that acts on it; none is silently dropped. And the node-placement fields pykubelet checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.pod_sync.admission import admit_to_node
from services.pod_sync.runtime_config import NodeFacts, container_config
from services.pod_sync.security import sandbox_security_context
from shared.host.facts import node_labels
from shared.model.podspec import ManifestInvalid, validate_pod


def pod(container=None, **spec):
    c = {"name": "c", "image": "i:1", **(container or {})}
    return validate_pod({"metadata": {"name": "p", "namespace": "ns1", "uid": "u1"},
                         "spec": {"containers": [c], **spec}})


@pytest.mark.parametrize("spec, container, names", [
    ({"hostUsers": False, "hostPID": True}, None, "spec: hostPID: Forbidden: when `hostUsers` is false"),
    ({"hostUsers": False, "hostNetwork": True}, None, "spec: hostNetwork: Forbidden: when `hostUsers` is false"),
    ({"ephemeralContainers": [{"name": "dbg", "image": "i:1", "ports": [{"containerPort": 80}]}]}, None,
     "spec.ephemeralContainers[0]: ports: ephemeral containers may not have ports"),
    ({"runtimeClassName": "gvisor"}, None, "spec: runtimeClassName: RuntimeClass is not supported"),
    ({"readinessGates": [{"conditionType": "x"}]}, None, "spec: readinessGates: not supported"),
    ({"setHostnameAsFQDN": True}, None, "spec: setHostnameAsFQDN: not supported"),
    ({}, {"securityContext": {"procMount": "Unmasked"}},
     'spec: containers[0].securityContext.procMount: Invalid value: "Unmasked": `hostUsers` must be false'),
    ({"securityContext": {"windowsOptions": {"runAsUserName": "x"}}}, None,
     "spec.securityContext: windowsOptions: Windows options"),
    ({}, {"volumeDevices": [{"name": "v", "devicePath": "/dev/x"}]}, "spec.containers[0]: volumeDevices: raw block"),
    ({}, {"comand": ["sh"]}, "spec.containers[0]: comand: unknown field"),
    ({}, {"livenessProbe": {"exec": {"command": ["true"]}, "periodSecond": 5}},
     "spec.containers[0].livenessProbe: periodSecond: unknown field"),
])
def test_a_field_pykubelet_does_not_implement_is_refused_by_name(spec, container, names):
    with pytest.raises(ManifestInvalid) as err:
        pod(container, **spec)
    assert names in str(err.value)


def test_fields_that_ask_nothing_or_concern_other_components_are_accepted():
    p = pod({"securityContext": {"procMount": "Default"}, "volumeDevices": []},
            ephemeralContainers=[], setHostnameAsFQDN=False, schedulerName="default-scheduler",
            tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
            preemptionPolicy="PreemptLowerPriority", serviceAccount="default",
            automountServiceAccountToken=False)
    assert p.spec.model_extra["schedulerName"] == "default-scheduler", "kept in the stored manifest"


def test_metadata_and_status_are_not_judged():
    p = validate_pod({"metadata": {"name": "p", "uid": "u1", "ownerReferences": [{"kind": "ReplicaSet"}],
                                   "managedFields": [{}], "resourceVersion": "7"},
                      "spec": {"containers": [{"name": "c", "image": "i:1"}]},
                      "status": {"phase": "Pending"}})
    assert p.metadata.name == "p"


NODE = NodeFacts(name="node1", ip="192.0.2.10", cpu_millicores=2000, memory_bytes=2**32, oom_floor=None,
                 pods_dir=Path("/nonexistent/pods"))


def test_selinux_options_and_stdin_once_reach_the_runtime(tmp_path):
    p = pod({"stdin": True, "stdinOnce": True, "securityContext": {"seLinuxOptions": {"level": "s0:c1,c2"}}},
            securityContext={"seLinuxOptions": {"type": "spc_t"}})
    assert sandbox_security_context(p, tmp_path).selinux_options.type == "spc_t"
    node = NodeFacts(**{**NODE.__dict__, "pods_dir": tmp_path / "pods"})
    cfg = container_config(p, p.spec.containers[0], 0, "i@sha256:1", False, "10.0.0.2", node)
    assert cfg.stdin and cfg.stdin_once
    sc = cfg.linux.security_context
    assert (sc.selinux_options.type, sc.selinux_options.level) == ("", "s0:c1,c2"), "the container's replace the pod's"
    with pytest.raises(ManifestInvalid, match="seLinuxOptions.level"):
        pod({"securityContext": {"seLinuxOptions": {"level": "s0\nx"}}})


LABELS = node_labels("node1")


def _affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize("spec, fits", [
    ({}, True),
    ({"nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": "node1"}}, True),
    ({"nodeSelector": {"disktype": "ssd"}}, False),
    ({"affinity": _affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node1"]}]})}, True),
    ({"affinity": _affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]})},
     False),
    ({"affinity": _affinity({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                                   "values": ["other"]}]})}, True),
    ({"affinity": _affinity({"matchExpressions": [{"key": "kubernetes.io/os", "operator": "DoesNotExist"}]})}, False),
    ({"affinity": _affinity({})}, False),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}}, True),
])
def test_node_selector_and_required_node_affinity_decide_admission(spec, fits):
    verdict = admit_to_node(pod(**spec), LABELS, "node1")
    assert verdict.admitted == fits
    if not fits:
        assert (verdict.reason, verdict.message) == ("NodeAffinity", "Predicate NodeAffinity failed")


def test_a_malformed_affinity_is_a_rejection_that_says_why():
    verdict = admit_to_node(pod(affinity=_affinity({"matchExpressions": [{"key": "n", "operator": "Gt",
                                                                          "values": ["1", "2"]}]})), LABELS, "node1")
    assert not verdict.admitted and "Gt of 'n' takes exactly one value" in verdict.message


@pytest.mark.parametrize("policy, ok", [("Recursive", True), ("MountOption", True), ("Relabel", False)])
def test_se_linux_change_policy_is_checked_as_the_api_server_checks_it(policy, ok):
    """GA in 1.36; it says how an SELinux host relabels volumes, which pykubelet never does."""
    spec = {"securityContext": {"seLinuxChangePolicy": policy}}
    if ok:
        assert pod(None, **spec).spec.securityContext.seLinuxChangePolicy == policy
    else:
        with pytest.raises(ManifestInvalid) as err:
            pod(None, **spec)
        assert "spec.securityContext.seLinuxChangePolicy" in str(err.value)
