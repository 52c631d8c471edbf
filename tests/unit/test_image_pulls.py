"""serializeImagePulls and maxParallelImagePulls: how many pulls the node runs at once
(services/pod_sync/images.py), counted on a runtime whose pulls take a moment."""

from __future__ import annotations

import asyncio

import pytest

from services.pod_sync.images import ImageManager
from shared.config.settings import ConfigError, load_kubelet_config
from shared.model.podspec import Container
from shared.runtime.cri.fake import FakeRuntime
from shared.tasks.retry import Backoff


class SlowPulls(FakeRuntime):
    def __init__(self) -> None:
        super().__init__()
        self.pulling = self.peak = 0

    async def pull_image(self, image, sandbox_config=None, auth=None):
        self.pulling += 1
        self.peak = max(self.peak, self.pulling)
        await asyncio.sleep(0.05)
        self.pulling -= 1
        return await super().pull_image(image, sandbox_config, auth)


@pytest.mark.parametrize("config,peak", [
    ({}, 4),                                   # pykubelet's default: every pull at once
    ({"serializeImagePulls": True}, 1),        # the kubelet's default: one at a time
    ({"serializeImagePulls": False, "maxParallelImagePulls": 2}, 2),
])
async def test_pulls_at_once_follow_the_config(config, peak):
    k, _ = load_kubelet_config(config)
    rt = SlowPulls()
    images = ImageManager(rt, Backoff(10, 300), k.image_pull_parallelism)
    await asyncio.gather(*(images.ensure(f"uid{i}", Container(name="c", image=f"reg/app{i}:1"), None)
                           for i in range(4)))
    assert len(rt.ops("pull_image")) == 4 and rt.peak == peak


def test_a_parallel_limit_with_serialized_pulls_is_refused():
    with pytest.raises(ConfigError, match="maxParallelImagePulls must be unset or 1 when serializeImagePulls is true"):
        load_kubelet_config({"serializeImagePulls": True, "maxParallelImagePulls": 3})
