"""Standalone mode: no API server. Static pod files are written into each agent's manifest
directory; a pod has started when the agent reports it Running (for pykubelet what
`pykubelet status` shows, read from the same store rows; for the kubelet its own /pods API),
polled every 50 ms. Same workloads as in cluster mode, one agent after the other."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import yaml
from cri_api.v1 import api_pb2 as cri

from bench.agents import Kubelet, Pykubelet
from bench.cluster import WORKLOADS, pod_manifest
from bench.stats import summary
from shared.runtime.cri import CRIClient

POLL = 0.05


def _write(directory: Path, name: str, image: str) -> None:
    tmp = directory / f".{name}.yaml.tmp"
    tmp.write_text(yaml.safe_dump(pod_manifest(name, image, None)))
    tmp.rename(directory / f"{name}.yaml")  # atomic: no agent reads half a file


async def _start(agent, names: list[str], image: str, rate: float | None, timeout: float = 600) -> list[float]:
    written: dict[str, float] = {}
    running: dict[str, float] = {}

    async def writer():
        for name in names:
            _write(agent.static_dir, name, image)
            written[name] = time.monotonic()
            if rate:
                await asyncio.sleep(1 / rate)

    task = asyncio.create_task(writer(), name="bench:write-manifests")
    deadline = time.monotonic() + timeout
    while len(running) < len(names):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{agent.name}: {len(names) - len(running)} static pods not Running after {timeout}s")
        now = time.monotonic()
        for name in await asyncio.to_thread(agent.running_static):
            if name in written and name not in running:
                running[name] = now
        await asyncio.sleep(POLL)
    await task
    return [running[n] - written[n] for n in names]


async def _remove_all(agent, names: list[str], timeout: float = 300) -> float:
    start = time.monotonic()
    for name in names:
        (agent.static_dir / f"{name}.yaml").unlink(missing_ok=True)
    c = CRIClient(agent.endpoint)
    try:
        while time.monotonic() - start < timeout:
            ready = [s for s in await c.list_pod_sandbox(agent.sandbox_labels) if s.state == cri.SANDBOX_READY]
            if not ready and await asyncio.to_thread(agent.static_pods_left) == 0:
                return time.monotonic() - start
            await asyncio.sleep(0.5)
    finally:
        await c.close()
    raise TimeoutError(f"{agent.name}: static pods not gone after {timeout}s")


async def run_agent(agent, progress) -> dict:
    progress(f"{agent.name} standalone: starting ...")
    await agent.start()
    image = agent.image("busybox")
    await _start(agent, ["warm"], image, None)
    await _remove_all(agent, ["warm"])
    out = {}
    for label, count, rate in WORKLOADS:
        progress(f"{agent.name} standalone: static pods, {label} ...")
        names = [f"f{count}-{i}" for i in range(count)]
        times = await _start(agent, names, image, rate)
        out[label] = {"startup": summary(times), "delete_all_seconds": round(await _remove_all(agent, names), 2)}
    return out


def run(root: Path, progress=print) -> dict:
    results = {}

    async def go():
        for agent in (Pykubelet(root / "pykubelet-standalone", None), Kubelet(root / "kubelet-standalone", None)):
            try:
                results[agent.name] = await run_agent(agent, progress)
            finally:
                await agent.stop()

    asyncio.run(go())
    return results
