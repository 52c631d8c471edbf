"""Each cap on what one pod may ask for: a pod at the cap is valid, one past it is refused before
it is parsed, with a message naming the field and the limit; an API pod past a cap is refused
with the reason PodLimitExceeded and an event."""

from __future__ import annotations

import pytest

from services.pod_sync.api_source import ApiPodSource
from shared.bus.events import RecordingRecorder
from shared.model import pod_limits as L
from shared.model.podspec import ManifestInvalid, validate_pod
from shared.store import DesiredPod, RefusedPod


def manifest(containers=None, init=(), volumes=(), annotations=None):
    return {"metadata": {"name": "p", "uid": "u1", "annotations": annotations or {}},
            "spec": {"containers": containers or [{"name": "app", "image": "busybox"}],
                     "initContainers": list(init), "volumes": list(volumes)}}


def containers(n, **fields):
    return [{"name": f"c{i}", "image": "busybox", **fields} for i in range(n)]


def refused(data) -> str:
    with pytest.raises(ManifestInvalid) as exc:
        validate_pod(data)
    assert exc.value.reason == "PodLimitExceeded", f"refused by something else: {exc.value}"
    return str(exc.value)


def test_containers_init_and_app_together():
    assert validate_pod(manifest(containers(64), init=[{**c, "name": f"i{c['name']}"} for c in containers(64)]))
    assert refused(manifest(containers(100), init=[{**c, "name": f"i{c['name']}"} for c in containers(29)])) == \
        "spec.containers: has 129 containers; pykubelet runs at most 128 in a pod (init, app and ephemeral containers together)"


def test_a_pod_of_fifty_thousand_containers_is_refused_by_the_count():
    assert "has 50000 containers" in refused(manifest(containers(50000)))


def env(n):
    return [{"name": f"E{i}", "value": "v"} for i in range(n)]


def test_env_entries_of_all_containers():
    assert validate_pod(manifest(containers(4, env=env(L.MAX_ENV // 4))))
    over = containers(4, env=env(L.MAX_ENV // 4))
    over[3]["env"] = env(L.MAX_ENV // 4 + 1)
    assert refused(manifest(over)) == ("spec.containers[3].env: the pod has more than 4096 env entries in all its "
                                       "containers (the most pykubelet accepts)")


def test_env_from_sources():
    sources = [{"configMapRef": {"name": f"cm{i}"}} for i in range(L.MAX_ENV_FROM)]
    assert validate_pod(manifest(containers(1, envFrom=sources)))
    assert refused(manifest(containers(1, envFrom=[*sources, sources[0]]))).startswith(
        "spec.containers[0].envFrom: the pod has more than 256 envFrom entries")


def test_init_containers_count_with_app_containers():
    init = [{"name": "init", "image": "busybox", "env": env(L.MAX_ENV)}]
    assert refused(manifest(containers(1, env=env(1)), init=init)).startswith("spec.containers[0].env: ")


def test_ports():
    ports = [{"containerPort": 1 + i} for i in range(L.MAX_PORTS)]
    assert validate_pod(manifest(containers(1, ports=ports)))
    assert refused(manifest(containers(1, ports=[*ports, {"containerPort": 9}]))).startswith(
        "spec.containers[0].ports: the pod has more than 1024 ports entries")


def test_volumes_and_volume_mounts():
    volumes = [{"name": f"v{i}", "emptyDir": {}} for i in range(L.MAX_VOLUMES)]
    assert validate_pod(manifest(volumes=volumes))
    assert refused(manifest(volumes=[*volumes, {"name": "one-more", "emptyDir": {}}])) == \
        "spec.volumes: has 513 volumes; pykubelet accepts at most 512"
    mounts = [{"name": "v0", "mountPath": f"/m{i}"} for i in range(L.MAX_VOLUME_MOUNTS // 2)]
    assert validate_pod(manifest(containers(2, volumeMounts=mounts), volumes=volumes[:1]))
    assert refused(manifest(containers(3, volumeMounts=mounts), volumes=volumes[:1])).startswith(
        "spec.containers[2].volumeMounts: the pod has more than 2048 volumeMounts entries")


@pytest.mark.parametrize("kind, source", [
    ("configMap", lambda items: {"name": "cm", "items": items}),
    ("secret", lambda items: {"secretName": "s", "items": items}),
    ("downwardAPI", lambda items: {"items": items}),
])
def test_items_of_a_volume(kind, source):
    items = [{"key": f"k{i}", "path": f"p{i}"} if kind != "downwardAPI" else
             {"path": f"p{i}", "fieldRef": {"fieldPath": "metadata.name"}} for i in range(L.MAX_VOLUME_ITEMS + 1)]
    assert validate_pod(manifest(volumes=[{"name": "v", kind: source(items[:-1])}]))
    assert refused(manifest(volumes=[{"name": "ok", "emptyDir": {}}, {"name": "v", kind: source(items)}])) == \
        f"spec.volumes[1].{kind}.items: has 1025 items; a volume may name at most 1024 files"


def test_projected_sources_and_their_items_together():
    token = {"serviceAccountToken": {"path": "token"}}
    assert validate_pod(manifest(volumes=[{"name": "v", "projected": {"sources": [token] * L.MAX_PROJECTED_SOURCES}}]))
    assert refused(manifest(volumes=[{"name": "v", "projected": {"sources": [token] * 129}}])) == \
        "spec.volumes[0].projected.sources: has 129 sources; pykubelet accepts at most 128"
    half = [{"key": f"k{i}", "path": f"p{i}"} for i in range(L.MAX_VOLUME_ITEMS // 2)]
    sources = [{"configMap": {"name": "a", "items": half}}, {"secret": {"name": "b", "items": half}}]
    assert validate_pod(manifest(volumes=[{"name": "v", "projected": {"sources": sources}}]))
    sources.append({"downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}})
    assert refused(manifest(volumes=[{"name": "v", "projected": {"sources": sources}}])) == \
        "spec.volumes[0].projected.sources: name 1025 items together; a volume may name at most 1024 files"


def test_annotations_total_size_as_the_api_server_counts_it():
    at_limit = {"a": "x" * (L.MAX_ANNOTATIONS_BYTES - 1)}
    assert validate_pod(manifest(annotations=at_limit))
    assert refused(manifest(annotations={"a": "x" * (L.MAX_ANNOTATIONS_BYTES - 2), "é": ""})) == \
        "metadata.annotations: Too long: must have at most 262144 bytes (has 262145)"


def test_what_is_not_a_list_is_left_to_the_pods_validation():
    with pytest.raises(ManifestInvalid) as exc:
        validate_pod({"metadata": {"name": "p"}, "spec": {"containers": "many", "volumes": {"a": 1}}})
    assert exc.value.reason == "" and "spec.containers" in str(exc.value)
    assert L.exceeded([]) is None and L.exceeded({"spec": None, "metadata": "x"}) is None


def test_an_api_pod_past_a_cap_is_refused_with_the_reason_and_an_event(store):
    events = RecordingRecorder()
    source = ApiPodSource(object(), "node1", store, events=events)
    pod = {"apiVersion": "v1", "kind": "Pod", **manifest(containers(200))}
    pod["metadata"].update(namespace="default", resourceVersion="1")
    assert source.apply_event("ADDED", pod) == {"u1"}
    with store.session() as s:
        assert s.get(DesiredPod, "u1") is None, "nothing of it is started"
        row = s.get(RefusedPod, "u1")
        assert (row.reason, row.message) == (
            "PodLimitExceeded", "pykubelet cannot run this pod: spec.containers: has 200 containers; pykubelet runs "
                                "at most 128 in a pod (init, app and ephemeral containers together)")
    assert events.events == [("Warning", "PodLimitExceeded", row.message)]
