"""A container's environment as the kubelet builds it: envFrom, env with configMap / secret keys,
service variables, and the errors a user sees when an object or key is missing."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from services.pod_sync.env_sources import EnvObjects, EnvSourceError, StaticEnvSource, secret_data
from services.pod_sync.runtime_config import NodeFacts, container_env
from services.pod_sync.service_env import service_env
from shared.model.podspec import ManifestInvalid, validate_pod

NODE = NodeFacts(name="node1", ip="192.0.2.10", cpu_millicores=2000, memory_bytes=4 * 2**30, oom_floor=None,
                 pods_dir=Path("/nonexistent"))


def pod(env=None, env_from=None, ns="ns1", **spec):
    return validate_pod({"metadata": {"name": "p", "namespace": ns, "uid": "u1"}, "spec": {
        "containers": [{"name": "app", "image": "busybox", "env": env or [], "envFrom": env_from or []}], **spec}})


def svc(name, ns, ip, *ports):
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": [dict(p) for p in ports]}}


async def env_of(p, source):
    c = p.spec.containers[0]
    warnings = []
    env = container_env(p, c, "10.88.0.5", NODE, await source.gather(p, c), lambda r, m: warnings.append((r, m)))
    return env, warnings


def test_service_variables_as_the_kubelet_names_them():
    env = service_env([svc("foo-service", "ns1", "10.96.0.20", {"name": "http", "port": 8765, "protocol": "TCP"},
                           {"name": "dns", "port": 53, "protocol": "UDP"})], "ns1", True)
    assert env == {
        "FOO_SERVICE_SERVICE_HOST": "10.96.0.20", "FOO_SERVICE_SERVICE_PORT": "8765",
        "FOO_SERVICE_SERVICE_PORT_HTTP": "8765", "FOO_SERVICE_SERVICE_PORT_DNS": "53",
        "FOO_SERVICE_PORT": "tcp://10.96.0.20:8765",
        "FOO_SERVICE_PORT_8765_TCP": "tcp://10.96.0.20:8765", "FOO_SERVICE_PORT_8765_TCP_PROTO": "tcp",
        "FOO_SERVICE_PORT_8765_TCP_PORT": "8765", "FOO_SERVICE_PORT_8765_TCP_ADDR": "10.96.0.20",
        "FOO_SERVICE_PORT_53_UDP": "udp://10.96.0.20:53", "FOO_SERVICE_PORT_53_UDP_PROTO": "udp",
        "FOO_SERVICE_PORT_53_UDP_PORT": "53", "FOO_SERVICE_PORT_53_UDP_ADDR": "10.96.0.20"}


def test_which_services_a_pod_sees():
    services = [svc("kubernetes", "default", "10.96.0.1", {"name": "https", "port": 443}),
                svc("mine", "ns1", "10.96.0.9", {"port": 80}),
                svc("other", "ns2", "10.96.0.7", {"port": 80}),
                svc("headless", "ns1", "None", {"port": 80})]
    names = {k.split("_SERVICE_HOST")[0] for k in service_env(services, "ns1", True) if k.endswith("_SERVICE_HOST")}
    assert names == {"KUBERNETES", "MINE"}, "own namespace and the master service; no headless, no others"
    linked_off = service_env(services, "ns1", False)
    assert linked_off["KUBERNETES_SERVICE_HOST"] == "10.96.0.1" and "MINE_SERVICE_HOST" not in linked_off


async def test_env_from_then_env_with_key_refs_and_services():
    source = StaticEnvSource(config_maps={("ns1", "cfg"): {"data-1": "value-1", "MODE": "fast", "1bad": "x"}},
                             secrets={("ns1", "sec"): {"PASSWORD": "s3cret"}},
                             services=[svc("db", "ns1", "10.96.0.9", {"port": 5432})])
    p = pod(env_from=[{"configMapRef": {"name": "cfg"}}, {"prefix": "p_", "secretRef": {"name": "sec"}}],
            env=[{"name": "MODE", "value": "slow"},
                 {"name": "URL", "value": "$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/$(MODE)"},
                 {"name": "KEY", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "data-1"}}},
                 {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASSWORD"}}},
                 {"name": "DB_SERVICE_PORT", "value": "override"}])
    env, warnings = await env_of(p, source)
    assert env["data-1"] == "value-1" and env["p_PASSWORD"] == "s3cret"
    assert env["MODE"] == "slow", "env overrides envFrom"
    assert env["URL"] == "10.96.0.9:5432/slow", "expansion sees envFrom, earlier env and services"
    assert env["KEY"] == "value-1" and env["PW"] == "s3cret"
    assert env["DB_SERVICE_PORT"] == "override" and env["DB_SERVICE_HOST"] == "10.96.0.9"
    assert "1bad" not in env
    assert warnings == [("InvalidEnvironmentVariableNames",
                         "Keys [1bad] from the EnvFrom configMap ns1/cfg were skipped since they are considered "
                         "invalid environment variable names.")]


async def test_missing_objects_and_keys():
    source = StaticEnvSource(config_maps={("ns1", "cfg"): {"a": "1"}})
    with pytest.raises(ValueError, match='configmaps "nope" not found'):
        await env_of(pod(env_from=[{"configMapRef": {"name": "nope"}}]), source)
    with pytest.raises(ValueError, match="couldn't find key b in ConfigMap ns1/cfg"):
        await env_of(pod(env=[{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "b"}}}]), source)
    with pytest.raises(ValueError, match='secrets "s" not found'):
        await env_of(pod(env=[{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]), source)
    env, _ = await env_of(pod(
        env_from=[{"secretRef": {"name": "nope", "optional": True}}],
        env=[{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "b", "optional": True}}},
             {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "c", "optional": True}}}]), source)
    assert "B" not in env and "C" not in env, "optional and missing: left out"


async def test_standalone_node_names_the_object_it_cannot_read():
    with pytest.raises(EnvSourceError, match="couldn't get configMap ns1/cfg: this node has no API server"):
        await env_of(pod(env_from=[{"configMapRef": {"name": "cfg"}}]), StaticEnvSource(api=False))
    env, _ = await env_of(pod(env=[{"name": "A", "value": "1"}]), StaticEnvSource(api=False))
    assert env == {"A": "1"}


def test_secret_data_is_decoded():
    assert secret_data({"data": {"k": base64.b64encode(b"v\n").decode()}}) == {"k": "v\n"}


@pytest.mark.parametrize("bad, message", [
    ({"env": [{"name": "A", "valueFrom": {"podRef": {}}}]}, "podRef is not supported by pykubelet"),
    ({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]}, "secretKeyRef needs a name and a key"),
    ({"envFrom": [{"prefix": "x"}]}, "exactly one of configMapRef, secretRef"),
])
def test_malformed_env_sources_are_refused_with_the_field(bad, message):
    with pytest.raises(ManifestInvalid, match=message):
        validate_pod({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", **bad}]}})


def test_unset_objects_default_to_nothing():
    p = pod(env=[{"name": "A", "value": "$(B)"}])
    assert container_env(p, p.spec.containers[0], "", NODE) == {"A": "$(B)"}
    assert EnvObjects().services == {}


@pytest.mark.parametrize("divisor, expected", [("0", "2"), (None, "2"), ("1m", "2000"), ("1", "2")])
def test_resource_field_divisor_as_the_api_server_defaults_it(divisor, expected):
    # An unset divisor reaches the node as "0" (the Quantity zero value): it means 1.
    ref = {"resource": "limits.cpu", **({"divisor": divisor} if divisor is not None else {})}
    p = pod(env=[{"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": ref}}])
    assert container_env(p, p.spec.containers[0], "", NODE)["CPU_LIMIT"] == expected
