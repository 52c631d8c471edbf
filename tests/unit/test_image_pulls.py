"""serializeImagePulls and maxParallelImagePulls: how many pulls the node runs at once, and
registryPullQPS / registryBurst: how many it makes a second (services/pod_sync/images.py),
counted on a runtime whose pulls take a moment."""

from __future__ import annotations

import asyncio

import pytest

from services.pod_sync.images import ImageManager, ImagePullError
from shared.config.settings import ConfigError, load_kubelet_config
from shared.model.podspec import Container
from shared.runtime.cri.fake import FakeRuntime
from shared.tasks.retry import Backoff
from shared.tasks.token_bucket import TokenBucket


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


async def test_pulls_over_registry_pull_qps_fail_as_the_kubelets_and_back_off():
    """registryPullQPS 1, registryBurst 2: of four pulls at once two are made; the others fail
    ErrImagePull, not made, and are in back-off like any failed pull."""
    k, _ = load_kubelet_config({"registryPullQPS": 1, "registryBurst": 2})
    rt = SlowPulls()
    images = ImageManager(rt, Backoff(10, 300), k.image_pull_parallelism, k.registry_pull_qps, k.registry_burst)
    results = await asyncio.gather(*(images.ensure(f"uid{i}", Container(name="c", image=f"reg/app{i}:1"), None)
                                     for i in range(4)), return_exceptions=True)
    failed = [r for r in results if isinstance(r, ImagePullError)]
    assert len(rt.ops("pull_image")) == 2 and len(failed) == 2
    assert {(f.reason, f.message) for f in failed} == {
        ("ErrImagePull", f'Failed to pull image "reg/app{i}:1": pull QPS exceeded (registryPullQPS 1, registryBurst 2)')
        for i in (2, 3)}, "the first two asked got the burst"
    with pytest.raises(ImagePullError) as exc:
        await images.ensure("uid2", Container(name="c", image="reg/app2:1"), None)
    assert exc.value.reason == "ImagePullBackOff"


async def test_registry_pull_qps_zero_is_no_limit():
    k, _ = load_kubelet_config({"registryPullQPS": 0, "registryBurst": 1})
    rt = SlowPulls()
    images = ImageManager(rt, Backoff(10, 300), k.image_pull_parallelism, k.registry_pull_qps, k.registry_burst)
    await asyncio.gather(*(images.ensure(f"uid{i}", Container(name="c", image=f"reg/app{i}:1"), None)
                           for i in range(20)))
    assert len(rt.ops("pull_image")) == 20


def test_the_bucket_refills_at_qps_up_to_burst(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("shared.tasks.token_bucket.time.monotonic", lambda: now[0])
    bucket = TokenBucket(2, 3)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False], "full at the start"
    now[0] += 0.5  # one token back at 2 a second
    assert [bucket.try_acquire() for _ in range(2)] == [True, False]
    now[0] += 60  # never more than burst saved up
    assert sum(bucket.try_acquire() for _ in range(10)) == 3


def test_negative_registry_settings_are_refused_in_the_kubelets_words():
    with pytest.raises(ConfigError, match=r"registryPullQPS \(--registry-qps\) -1 must not be a negative number"):
        load_kubelet_config({"registryPullQPS": -1})
    with pytest.raises(ConfigError, match=r"registryBurst \(--registry-burst\) -2 must not be a negative number"):
        load_kubelet_config({"registryBurst": -2})
    assert load_kubelet_config({"registryBurst": 0})[0].registry_burst == 10, "0: the default, as the kubelet"


class NoImageService(FakeRuntime):
    async def image_status(self, image):
        import grpc

        from shared.runtime.cri import CRIError
        raise CRIError("image_status", grpc.StatusCode.UNAVAILABLE, "connect: no such file (is the image service running "
                                                                     "at unix:///run/images.sock?)")


async def test_an_image_service_that_does_not_answer_is_the_kubelets_image_inspect_error():
    """ImageStatus failing (no image service) is not a failed pull: the kubelet's ImageInspectError,
    no pull made, and no back-off (the next sync asks again)."""
    rt = NoImageService()
    images = ImageManager(rt, Backoff(10, 300))
    for _ in range(2):
        with pytest.raises(ImagePullError) as exc:
            await images.ensure("uid", Container(name="c", image="reg/app:1"), None)
        assert exc.value.reason == "ImageInspectError"
        assert exc.value.message.startswith('Failed to inspect image "reg/app:1": connect: no such file (is the image '
                                            "service running at unix:///run/images.sock?)")
    assert not rt.ops("pull_image")
