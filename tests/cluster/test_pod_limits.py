"""Caps in cluster mode, on pods the API server accepts: the $(VAR) bomb of issue 29 and a pod
past a count cap fail with PodLimitExceeded and an event naming the field and the limit; a
configMap value too large for execve is CreateContainerConfigError saying so."""

from __future__ import annotations

import json


def _failed(cluster, name: str) -> dict:
    return cluster.wait_pod(name, lambda p: p.get("status", {}).get("phase") == "Failed", 60, f"{name} Failed")


def _events(cluster, name: str) -> str:
    return cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}").stdout


def test_the_bomb_and_a_crowd_of_containers_fail_with_the_limit_they_pass(cluster):
    image = cluster.node.image("busybox")
    env = [{"name": "V0", "value": "x"}] + [{"name": f"V{i}", "value": f"$(V{i - 1})$(V{i - 1})"}
                                           for i in range(1, 30)]
    cluster.create_pod("api-bomb", {"containers": [{"name": "app", "image": image, "command": ["sleep", "3600"],
                                                    "env": env}]})
    cluster.create_pod("api-crowd", {"containers": [{"name": f"c{i}", "image": image} for i in range(129)]})
    bomb, crowd = _failed(cluster, "api-bomb"), _failed(cluster, "api-crowd")
    assert bomb["status"]["reason"] == "PodLimitExceeded"
    assert bomb["status"]["message"] == ("Pod was rejected: spec.containers[0].env[17] (V17) would be larger than "
                                         "131072 bytes, the kernel's limit for one environment string "
                                         "(MAX_ARG_STRLEN)")
    assert crowd["status"]["reason"] == "PodLimitExceeded"
    assert "spec.containers: has 129 containers; pykubelet runs at most 128" in crowd["status"]["message"]
    assert "PodLimitExceeded" in _events(cluster, "api-bomb") and "PodLimitExceeded" in _events(cluster, "api-crowd")
    for pod in (bomb, crowd):
        assert not cluster.node.sandboxes_of(pod["metadata"]["uid"]), "nothing of it was started"
    cluster.kubectl("delete", "pod", "api-bomb", "api-crowd", "--timeout=60s")


def test_a_config_map_value_too_large_to_exec_is_create_container_config_error(cluster):
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "huge-setting"},
        "data": {"HUGE": "z" * (200 * 1024)}}))
    cluster.create_pod("huge-env", {"containers": [{"name": "app", "image": cluster.node.image("busybox"),
                                                    "command": ["sleep", "3600"],
                                                    "envFrom": [{"configMapRef": {"name": "huge-setting"}}]}]})
    pod = cluster.wait_pod("huge-env", lambda p: any(
        (c.get("state", {}).get("waiting") or {}).get("reason") == "CreateContainerConfigError"
        for c in p.get("status", {}).get("containerStatuses", [])), 60, "CreateContainerConfigError")
    message = pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert message == ("spec.containers[0].envFrom[0] (HUGE) would be larger than 131072 bytes, the kernel's limit "
                       "for one environment string (MAX_ARG_STRLEN)")
    assert "(HUGE) would be larger than 131072 bytes" in _events(cluster, "huge-env")
    assert not [c for c in cluster.node.containers_of(pod["metadata"]["uid"]) if c.metadata.name == "app"]
    cluster.kubectl("delete", "pod", "huge-env", "--wait=false")
    cluster.kubectl("delete", "configmap", "huge-setting")
