"""configMapAndSecretChangeDetectionStrategy (services/volume/api_objects.py): Get reads every
time and watches nothing; Cache reads again once the Node's TTL annotation (else 60 s) has passed,
and afresh for a pod seen for the first time."""

from __future__ import annotations

import asyncio

import pytest

from services.volume.api_objects import CACHE, GET, NODE_TTL_ANNOTATION, POLL_TTL, TTL_READ_EVERY, ApiObjects
from shared.config.settings import ConfigError, load_kubelet_config
from tests.unit.test_api_objects_watch_cap import RecordingApi

CM = ("configmap", "ns", "cm")


class NodeApi(RecordingApi):
    """The Node carries the TTL annotation the test sets (None: none)."""

    def __init__(self) -> None:
        super().__init__()
        self.ttl: str | None = None

    async def get_or_none(self, url: str):
        if "/nodes/" in url:
            self.gets.append(url)
            annotations = {} if self.ttl is None else {NODE_TTL_ANNOTATION: self.ttl}
            return {"metadata": {"name": "node-a", "annotations": annotations}}
        return await super().get_or_none(url)


def object_reads(api: RecordingApi) -> int:
    return sum("/configmaps/" in url for url in api.gets)


async def test_get_reads_every_time_and_watches_nothing():
    api = RecordingApi()
    objects = ApiObjects(api, strategy=GET)
    for _ in range(3):
        assert (await objects.config_map("ns", "cm"))["data"] == {"k": "v"}
    await asyncio.sleep(0)
    assert object_reads(api) == 3 and api.open_watches == 0


async def test_cache_reads_again_after_the_nodes_ttl():
    api, now = NodeApi(), [1000.0]
    api.ttl = "30"
    objects = ApiObjects(api, strategy=CACHE, node_name="node-a", clock=lambda: now[0])
    await objects.config_map("ns", "cm")
    now[0] += 29
    await objects.config_map("ns", "cm")
    assert object_reads(api) == 1, "within the TTL: from the cache"
    now[0] += 2
    await objects.config_map("ns", "cm")
    assert object_reads(api) == 2
    # The annotation gone: 60 s, the kubelet's default, once the Node is read again.
    api.ttl = None
    now[0] += TTL_READ_EVERY
    await objects.config_map("ns", "cm")
    now[0] += POLL_TTL - 1
    await objects.config_map("ns", "cm")
    assert object_reads(api) == 3
    await asyncio.sleep(0)
    assert api.open_watches == 0


@pytest.mark.parametrize("annotation", ["ten", " 5", "5s", "1_0"])
async def test_a_ttl_annotation_go_cannot_read_is_the_default(annotation):
    api, now = NodeApi(), [1000.0]
    api.ttl = annotation
    objects = ApiObjects(api, strategy=CACHE, node_name="node-a", clock=lambda: now[0])
    await objects.config_map("ns", "cm")
    now[0] += POLL_TTL - 1
    await objects.config_map("ns", "cm")
    assert object_reads(api) == 1


async def test_under_cache_a_new_pod_reads_its_objects_afresh():
    api, now = NodeApi(), [1000.0]
    api.ttl = "3600"
    objects = ApiObjects(api, strategy=CACHE, node_name="node-a", clock=lambda: now[0])
    objects.register_pod("old", {CM})
    await objects.config_map("ns", "cm")
    objects.register_pod("old", {CM})  # the same pod again: the cache stands
    await objects.config_map("ns", "cm")
    assert object_reads(api) == 1
    objects.register_pod("new", {CM})
    await objects.config_map("ns", "cm")
    assert object_reads(api) == 2
    objects.forget_pod("old")
    objects.register_pod("old", {CM})  # a pod gone and seen again (a static pod re-created) is new again
    await objects.config_map("ns", "cm")
    assert object_reads(api) == 3


def test_an_unknown_strategy_is_refused_with_the_kubelets_words():
    with pytest.raises(ConfigError, match="unknown configmap and secret manager mode: Poll"):
        load_kubelet_config({"configMapAndSecretChangeDetectionStrategy": "Poll"})
    assert load_kubelet_config({"configMapAndSecretChangeDetectionStrategy": ""})[0] \
        .config_map_and_secret_change_detection_strategy == "Watch"
