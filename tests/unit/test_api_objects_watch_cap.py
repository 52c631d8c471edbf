"""configMaps and secrets past the watch cap are read with a TTL instead of a watch (and a
connection) each; a freed watch slot is taken by the next object read."""

from __future__ import annotations

import asyncio

from services.volume.api_objects import POLL_TTL, ApiObjects


class RecordingApi:
    """The part of KubeApi that ApiObjects uses: GETs are counted, watches stay open."""

    def __init__(self) -> None:
        self.gets: list[str] = []
        self.open_watches = 0

    async def get_or_none(self, url: str):
        self.gets.append(url)
        return {"metadata": {"name": url.rsplit("/", 1)[1]}, "data": {"k": "v"}}

    async def watch(self, url, resource_version, timeout_seconds, **params):
        self.open_watches += 1
        try:
            await asyncio.Event().wait()
        finally:
            self.open_watches -= 1
        yield  # pragma: no cover  (an async generator that never yields)


async def test_objects_past_the_cap_are_read_with_a_ttl_not_watched():
    api, now = RecordingApi(), [1000.0]
    objects = ApiObjects(api, max_watches=3, clock=lambda: now[0])
    try:
        for i in range(10):
            assert (await objects.config_map("ns", f"cm{i}"))["metadata"]["name"] == f"cm{i}"
        await asyncio.sleep(0)
        assert api.open_watches == 3
        assert len(api.gets) == 10
        for i in range(10):  # watched ones from the cache, the rest within their TTL too
            await objects.config_map("ns", f"cm{i}")
        assert len(api.gets) == 10
        now[0] += POLL_TTL + 1
        for i in range(10):
            await objects.config_map("ns", f"cm{i}")
        assert len(api.gets) == 17  # the 7 read without a watch, once each
        assert api.open_watches == 3

        # pods no longer refer to cm0..cm2: their watches stop, the next objects take the slots
        objects.stop_unused_watches({("configmap", "ns", f"cm{i}") for i in range(3, 10)})
        for i in range(3, 10):
            await objects.config_map("ns", f"cm{i}")
        await asyncio.sleep(0)
        assert api.open_watches == 3
        assert len(api.gets) == 20  # cm3..cm5 read once more as they became watched; the rest cached
    finally:
        await objects.close()
