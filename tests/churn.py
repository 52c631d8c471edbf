"""The churn workload: pods that use what a pod's start and removal must set up and give back
(an init container, emptyDir, configMap and secret volumes, readiness and liveness probes, a pod
network), created in waves and deleted again. The churn test (tests/pod_churn/test_pod_churn.py)
runs a few waves on pykubelet; the churn benchmark (bench/churn.py) thousands of pods on both
agents."""

from __future__ import annotations

NAMESPACE = "default"
CONFIG_MAP, SECRET = "churn-config", "churn-secret"
PORT = 8080


def config_objects() -> list[dict]:
    """The ConfigMap and Secret every churn pod mounts."""
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
             "data": {"greeting": "hello from the churn config\n"}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE},
             "stringData": {"token": "churn-secret-token\n"}}]


def churn_pod(name: str, image: str, node_name: str, label: str = "churn") -> dict:
    """The init container copies the configMap's file into the emptyDir; the app serves it (and the
    secret) over HTTP, which the readiness probe asks for: Ready means every volume was there."""
    mounts = [{"name": "work", "mountPath": "/www"}, {"name": "config", "mountPath": "/config"},
              {"name": "secret", "mountPath": "/secret", "readOnly": True}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"churn": label}},
            "spec": {"nodeName": node_name, "terminationGracePeriodSeconds": 1,
                     "initContainers": [{"name": "init", "image": image, "volumeMounts": mounts,
                                         "command": ["sh", "-c", "cp /config/greeting /secret/token /www/"]}],
                     "containers": [{"name": "app", "image": image, "volumeMounts": mounts,
                                     "command": ["httpd", "-f", "-p", str(PORT), "-h", "/www"],
                                     "readinessProbe": {"httpGet": {"path": "/token", "port": PORT},
                                                        "periodSeconds": 5},
                                     "livenessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 10}}],
                     "volumes": [{"name": "work", "emptyDir": {}},
                                 {"name": "config", "configMap": {"name": CONFIG_MAP}},
                                 {"name": "secret", "secret": {"secretName": SECRET}}]}}
