"""The pod sandbox stats sample: served from the latest sample, refreshed in the background while
someone asks, one runtime call at a time."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from cri_api.v1 import api_pb2 as cri

from services.node_api.stats.sandbox_stats import SandboxStatsCache
from shared.runtime.cri.client import CRIError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlowRuntime:
    """ListPodSandboxStats that takes `delay` seconds and counts its calls; each answer carries
    the call number as the pod's CPU so a test can tell samples apart."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0
        self.error: CRIError | None = None

    async def list_pod_sandbox_stats(self) -> list[cri.PodSandboxStats]:
        self.calls += 1
        n = self.calls
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return [cri.PodSandboxStats(
            attributes=cri.PodSandboxAttributes(id="sb-1"),
            linux=cri.LinuxPodSandboxStats(cpu=cri.CpuUsage(usage_core_nano_seconds=cri.UInt64Value(value=n))))]


def cpu(sample) -> int:
    return sample["sb-1"].linux.cpu.usage_core_nano_seconds.value


@pytest.fixture
async def cache_and_runtime():
    runtime, clock = SlowRuntime(), Clock()
    cache = SandboxStatsCache(runtime, interval=10.0, idle=120.0, clock=clock)
    yield cache, runtime, clock
    await cache.close()


async def test_requests_within_the_interval_share_one_sample(cache_and_runtime):
    cache, runtime, clock = cache_and_runtime
    assert cpu(await cache.get()) == 1
    clock.now += 9
    assert cpu(await cache.get()) == 1
    assert runtime.calls == 1


async def test_an_older_sample_is_served_while_a_new_one_is_taken(cache_and_runtime):
    """At 250 pods ListPodSandboxStats takes seconds: a request past the interval gets the
    sample there is at once, and the runtime is asked in the background."""
    cache, runtime, clock = cache_and_runtime
    runtime.delay = 0.05
    await cache.get()
    clock.now += 10
    assert cpu(await asyncio.wait_for(cache.get(), 0.02)) == 1, "served without waiting for the runtime"
    await asyncio.sleep(0.1)
    assert cpu(await cache.get()) == 2, "the refresh it started is served next"


async def test_a_stale_sample_is_not_served(cache_and_runtime):
    cache, runtime, clock = cache_and_runtime
    await cache.get()
    clock.now += 30
    assert cpu(await cache.get()) == 2, "a sample as old as `stale` waits for a new one"


async def test_concurrent_requests_wait_for_one_runtime_call():
    runtime = SlowRuntime(delay=0.05)
    cache = SandboxStatsCache(runtime, clock=Clock())
    try:
        samples = await asyncio.gather(*(cache.get() for _ in range(20)))
    finally:
        await cache.close()
    assert runtime.calls == 1
    assert {cpu(s) for s in samples} == {1}


async def test_a_cancelled_request_does_not_cancel_the_shared_call():
    runtime = SlowRuntime(delay=0.05)
    cache = SandboxStatsCache(runtime, clock=Clock())
    try:
        first = asyncio.ensure_future(cache.get())
        second = asyncio.ensure_future(cache.get())
        await asyncio.sleep(0.01)
        first.cancel()
        assert cpu(await asyncio.wait_for(second, 2)) == 1
    finally:
        await cache.close()


async def test_the_sample_is_refreshed_in_the_background_while_asked_for():
    runtime, clock = SlowRuntime(), Clock()
    cache = SandboxStatsCache(runtime, interval=0.1, idle=120.0, clock=clock)
    try:
        await cache.get()
        await asyncio.sleep(0.35)
        assert runtime.calls >= 3, "refreshed every interval/2 without a request waiting"
        assert cpu(await cache.get()) >= 3, "the request got a background sample"
    finally:
        await cache.close()


async def test_the_background_refresh_stops_when_nobody_asks():
    runtime, clock = SlowRuntime(), Clock()
    cache = SandboxStatsCache(runtime, interval=0.05, idle=120.0, clock=clock)
    try:
        await cache.get()
        clock.now += 121
        await asyncio.sleep(0.1)
        calls = runtime.calls
        await asyncio.sleep(0.15)
        assert runtime.calls == calls, "no runtime calls on a node nobody scrapes"
    finally:
        await cache.close()


async def test_a_runtime_error_is_not_cached(cache_and_runtime):
    cache, runtime, clock = cache_and_runtime
    runtime.error = CRIError("list_podsandbox_stats", grpc.StatusCode.UNAVAILABLE, "connection refused")
    assert await cache.get() is None
    runtime.error = None
    assert cpu(await cache.get()) == 2, "the next request asks again"
