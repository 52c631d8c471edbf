"""Pod security fields of Kubernetes 1.37 as the kubelet 1.37 admits them, on pods the API server
accepts: supplementalGroupsPolicy Strict on a node whose runtime cannot apply it."""

from __future__ import annotations

import pytest


def test_strict_supplemental_groups_are_refused_where_the_runtime_cannot_keep_them(cluster):
    """Strict needs the runtime's word that it applies it (the Node's status.features, which
    Debian's containerd 1.6 does not report): the pod fails at admission in the kubelet's words,
    while Merge runs with the groups asked for."""
    features = cluster.node_obj()["status"].get("features") or {}
    if features.get("supplementalGroupsPolicy"):
        pytest.fail("this node's runtime applies supplementalGroupsPolicy Strict: the test needs one that does not "
                    "(make test runs Debian's containerd 1.6)")
    image = cluster.node.image("busybox")
    for name, policy in (("groups-strict", "Strict"), ("groups-merge", "Merge")):
        cluster.create_pod(name, {
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000],
                                "supplementalGroupsPolicy": policy},
            "containers": [{"name": "app", "image": image, "command": ["sleep", "3600"]}]})
    strict = cluster.wait_pod("groups-strict", lambda p: p.get("status", {}).get("phase") == "Failed", 60,
                              "the Strict pod Failed")
    assert strict["status"]["reason"] == "SupplementalGroupsPolicyNotSupported"
    assert strict["status"]["message"] == "SupplementalGroupsPolicy=Strict is not supported in this node"
    assert not cluster.node.sandboxes_of(strict["metadata"]["uid"]), "nothing of it was started"
    cluster.wait_pod("groups-merge", lambda p: p.get("status", {}).get("phase") == "Running", 60, "the Merge pod")
    groups = cluster.kubectl("exec", "groups-merge", "--", "id", "-G").stdout.split()
    assert groups[0] == "3000" and "4000" in groups, groups
    cluster.kubectl("delete", "pod", "groups-strict", "groups-merge", "--timeout=60s")
