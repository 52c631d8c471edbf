"""A container's environment from the API server: envFrom and key references to configMaps and
secrets, and the service variables the kubelet injects."""

from __future__ import annotations

import json

from tests.integration.conftest import wait_for


def _apply(cluster, obj: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps(obj))


def _env_of_finished_pod(cluster, name: str) -> dict[str, str]:
    cluster.wait_pod(name, lambda p: p.get("status", {}).get("phase") == "Succeeded", 60, "Succeeded")
    out = cluster.kubectl("logs", name).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_env_from_config_maps_secrets_and_services(cluster):
    cluster.kubectl("create", "configmap", "env-settings", "--from-literal=MODE=fast", "--from-literal=data-1=one")
    cluster.kubectl("create", "secret", "generic", "env-secret", "--from-literal=PASSWORD=s3cret")
    _apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "env-db"},
                     "spec": {"ports": [{"name": "pg", "port": 5432}], "selector": {"app": "db"}}})
    svc_ip = cluster.get("service", "env-db")["spec"]["clusterIP"]
    # fileKeyRef (EnvFiles, on by default since 1.35): a value an init container wrote to an emptyDir.
    cluster.create_pod("env-pod", {"restartPolicy": "Never", "volumes": [{"name": "data", "emptyDir": {}}],
                                   "initContainers": [{
        "name": "writer", "image": cluster.node.image("busybox"), "volumeMounts": [{"name": "data", "mountPath": "/d"}],
        "command": ["sh", "-c", "echo \"DB_USER='admin'\" > /d/config.env"]}], "containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["env"],
        "envFrom": [{"configMapRef": {"name": "env-settings"}}, {"prefix": "S_", "secretRef": {"name": "env-secret"}}],
        "env": [{"name": "MODE", "value": "slow"},
                {"name": "DB", "value": "$(ENV_DB_SERVICE_HOST):$(ENV_DB_SERVICE_PORT_PG)"},
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "PASSWORD"}}},
                {"name": "ONE", "valueFrom": {"configMapKeyRef": {"name": "env-settings", "key": "data-1"}}},
                {"name": "USER_FROM_FILE", "valueFrom": {"fileKeyRef": {
                    "volumeName": "data", "path": "config.env", "key": "DB_USER"}}}]}]})
    env = _env_of_finished_pod(cluster, "env-pod")
    assert env["USER_FROM_FILE"] == "admin"
    assert env["MODE"] == "slow" and env["data-1"] == "one" and env["S_PASSWORD"] == "s3cret"
    assert env["PW"] == "s3cret" and env["ONE"] == "one"
    assert env["DB"] == f"{svc_ip}:5432" and env["ENV_DB_PORT"] == f"tcp://{svc_ip}:5432"
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1" and env["KUBERNETES_SERVICE_PORT"] == "443"
    cluster.kubectl("delete", "pod", "env-pod", "--wait=false")


def test_service_links_off_keeps_only_the_master_service(cluster):
    cluster.create_pod("nolinks", {"restartPolicy": "Never", "enableServiceLinks": False, "containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["env"]}]})
    env = _env_of_finished_pod(cluster, "nolinks")
    assert "KUBERNETES_SERVICE_HOST" in env and not any(k.startswith("ENV_DB_") for k in env)
    cluster.kubectl("delete", "pod", "nolinks", "--wait=false")


def test_missing_key_is_create_container_config_error_and_recovers(cluster):
    cluster.kubectl("create", "configmap", "late-settings", "--from-literal=other=1")
    cluster.create_pod("missing-key", {"containers": [{
        "name": "app", "image": cluster.node.image("busybox"), "command": ["sh", "-c", "echo $LATE; sleep 3600"],
        "env": [{"name": "LATE", "valueFrom": {"configMapKeyRef": {"name": "late-settings", "key": "late"}}}]}]})
    pod = cluster.wait_pod("missing-key", lambda p: any(
        (c.get("state", {}).get("waiting") or {}).get("reason") == "CreateContainerConfigError"
        for c in p.get("status", {}).get("containerStatuses", [])), 60, "CreateContainerConfigError")
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["message"] == "couldn't find key late in ConfigMap default/late-settings"
    events = cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=missing-key").stdout
    assert "couldn't find key late" in events
    # The key appears: the next sync starts the container with it.
    cluster.kubectl("patch", "configmap", "late-settings", "-p", json.dumps({"data": {"late": "here"}}))
    cluster.wait_pod("missing-key", lambda p: p.get("status", {}).get("phase") == "Running", 90, "Running")
    wait_for(lambda: cluster.kubectl("logs", "missing-key").stdout.strip() == "here", 30, "the value in the log")
    cluster.kubectl("delete", "pod", "missing-key", "--wait=false")
