"""Issue 29, case 2: a `$(VAR)` expansion bomb. A 1.5 KB static pod whose 30 env vars are each
`$(previous)$(previous)` (2^29 times the first value): on the unfixed node pod-sync's RSS went
from 88 MB to 8.6 GB and no pod started after it. Now the pod is refused at admission, saying
which variable passed which limit, pod-sync's memory stays where it was, and the node's other
work goes on while the pod is there."""

from __future__ import annotations

import os
import signal
import time

import yaml

from tests.security.conftest import SecureNode, assert_node_serves

VARS = 30
# Generous: the refused pod costs pod-sync at most a budget of 1 MiB of strings.
RSS_GROWTH_LIMIT = 200 * 2**20


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def _bomb_manifest(node) -> str:
    env = [{"name": "V0", "value": "x"}]
    env += [{"name": f"V{i}", "value": f"$(V{i - 1})$(V{i - 1})"} for i in range(1, VARS)]
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bomb"}, "spec": {
        "terminationGracePeriodSeconds": 2,
        "containers": [{"name": "app", "image": node.image("busybox"), "command": ["sh", "-c", "echo $(V29)"],
                        "env": env}]}})


def _stop_the_attack(node, pod_sync: int) -> None:
    """Once pod-sync is past the bound, do not let it take the machine: the manifest goes and
    pod-sync is killed (the supervisor restarts it without the pod)."""
    node.remove("bomb.yaml")
    try:
        os.kill(pod_sync, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_expansion_bomb_is_refused_and_pod_sync_stays_small(secure_node: SecureNode, pods, canary):
    node = secure_node.node
    pod_sync = node.service_pid("pod-sync")
    before = _rss(pod_sync)
    manifest = _bomb_manifest(node)
    assert len(manifest) < 2048, "the attack is a small file"
    node.write("bomb.yaml", manifest)

    peak, deadline, refused = before, time.monotonic() + 60, None
    while refused is None:
        peak = max(peak, _rss(pod_sync))
        if peak - before > RSS_GROWTH_LIMIT:
            _stop_the_attack(node, pod_sync)
            raise AssertionError(f"pod-sync grew from {before >> 20} MiB to {peak >> 20} MiB on the bomb")
        pod = node.pod("bomb")
        if pod is not None and pod["phase"] == "Failed":
            refused = pod
        elif time.monotonic() > deadline:
            raise AssertionError(f"the bomb was not refused within 60 s; now: {pod}")
        time.sleep(0.1)

    assert refused["status"]["reason"] == "PodLimitExceeded", refused["status"]
    message = refused["status"]["message"]
    assert "spec.containers[0].env[" in message and "131072 bytes" in message, message
    assert not node.sandboxes_of(refused["uid"]), "nothing of the bomb was started"

    assert_node_serves(secure_node, "beside-the-bomb")
    text = node.status_output()
    assert "bomb-" in text and "PodLimitExceeded" in text, text
    assert node.pod("bomb")["phase"] == "Failed", "still there, still refused"

    peak = max(peak, _rss(pod_sync))
    assert node.service_pid("pod-sync") == pod_sync, "pod-sync was never restarted"
    assert peak - before <= RSS_GROWTH_LIMIT, f"pod-sync grew from {before >> 20} MiB to {peak >> 20} MiB"


def test_pods_past_the_caps_are_refused_by_name_while_the_node_serves(secure_node: SecureNode, pods):
    """Standalone, end to end: a pod past a count cap and one past the annotations' size are
    reported as unusable manifests naming the field and the cap; a pod whose environment passes
    MAX_ARG_STRLEN only once its values are known (a 200 KiB annotation through the downward
    API) waits in CreateContainerConfigError saying so, and no container of it is created."""
    node = secure_node.node
    image = node.image("busybox")
    node.write_pod("crowd", {"containers": [{"name": f"c{i}", "image": image} for i in range(129)]})
    node.write_pod("fat", {"containers": [{"name": "app", "image": image}]},
                   annotations={"note": "x" * (300 * 1024)})
    node.write_pod("wide-env", {"containers": [{"name": "app", "image": image, "command": ["sleep", "3600"], "env": [
        {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}}]}]},
        annotations={"note": "y" * (200 * 1024)})
    _, errors = node.wait_manifest_errors(2)
    assert "spec.containers: has 129 containers; pykubelet runs at most 128 in a pod" in errors["crowd.yaml"]
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in errors["fat.yaml"]
    wide = node.wait_pod("wide-env", lambda p: p["containers"][0]["reason"] == "CreateContainerConfigError", 60,
                         "wide-env in CreateContainerConfigError")
    assert_node_serves(secure_node, "beside-the-caps")
    [status] = wide["status"]["containerStatuses"]
    assert status["state"]["waiting"]["message"] == (
        "spec.containers[0].env[0] (NOTE) would be larger than 131072 bytes, the kernel's limit for one "
        "environment string (MAX_ARG_STRLEN)")
    assert not node.containers_of(wide["uid"]), "no container was created"
