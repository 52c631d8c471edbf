"""Eviction, cluster mode: how fast each agent takes a memory hog off the node.

Both agents run with the same config: evictionHard memory.available set MARGIN below what the
machine has available when the agent starts (the kubelet's own formula: capacity minus the root
cgroup's working set), evictionPressureTransitionPeriod 5s. Each run, a BestEffort pod grows by
50 MiB every 0.2 s to 400 MiB past the threshold and holds it. The bench samples memory.available
every 20 ms; the reaction time runs from the first sample below the threshold to the moment the
pod's containers no longer run in the runtime and the API shows it Failed with reason Evicted.
Between runs the node is left until its MemoryPressure condition is False again (both agents
refuse BestEffort pods while it is True). A hog refused all the same (the Node's condition lags
the agent's own) or evicted before it crossed the threshold (the agent acting on figures from
before it) is tried again; such retries are counted and shown, not timed.

Also: the CPU of pykubelet's eviction service over IDLE_SECONDS with no pressure (the kubelet's
eviction manager is part of its one process and cannot be measured apart).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kubernetes_asyncio import client

from bench.agents import Kubelet, Pykubelet
from bench.cluster import delete_all, k8s, wait_node_ready
from bench.stats import summary
from bench.steady_state import measure
from services.eviction.signals import SignalReader
from shared.runtime.cri import CRIClient
from tests.cluster.harness import KUBELET_LABEL, ControlPlane
from tests.integration.conftest import NODE_NAME

MIB, GIB = 2**20, 2**30
RUNS = 5
MARGIN = 2 * GIB
OVERSHOOT_MIB = 400
STEP_MIB = 50
SAMPLE_SECONDS = 0.02
CHECK_SECONDS = 0.05
RUN_TIMEOUT = 120.0
IDLE_SECONDS = 60.0
ADMISSION_ATTEMPTS = 5
NAMESPACE = "default"


def memory_available() -> int:
    return SignalReader(Path("/"), 0).memory()["memory.available"].available


def config(threshold: int) -> str:
    return f"evictionHard:\n  memory.available: {threshold // MIB}Mi\nevictionPressureTransitionPeriod: 5s\n"


def hog_pod(name: str, image: str, node_name: str, total_mib: int) -> dict:
    steps = max(1, total_mib // STEP_MIB)
    script = (f"i=0; while [ $i -lt {steps} ]; do dd if=/dev/zero bs={STEP_MIB}M count=1 2>/dev/null "
              f"| sleep 3600 & i=$((i+1)); sleep 0.2; done; sleep 3600")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "eviction"}},
            "spec": {"nodeName": node_name, "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "hog", "image": image, "command": ["sh", "-c", script]}]}}


async def _memory_pressure(core: client.CoreV1Api, node: str) -> bool:
    obj = await core.read_node(node)
    return any(c.type == "MemoryPressure" and c.status == "True" for c in obj.status.conditions or [])


async def _wait_no_pressure(core: client.CoreV1Api, node: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while await _memory_pressure(core, node):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node} still reports MemoryPressure after {timeout:.0f}s")
        await asyncio.sleep(0.5)


async def _pod_state(core: client.CoreV1Api, cri: CRIClient, name: str) -> str:
    """"evicted" (Failed/Evicted and nothing of it runs), "refused" (turned away at admission),
    or "" (neither yet)."""
    pod = await core.read_namespaced_pod(name, NAMESPACE)
    if pod.status.phase != "Failed" or pod.status.reason != "Evicted":
        return ""
    if (pod.status.message or "").startswith("The node had condition"):
        return "refused"
    running = [c for c in await cri.list_containers({"io.kubernetes.pod.uid": pod.metadata.uid}) if c.state == 1]
    return "" if running else "evicted"


async def _timed_eviction(core: client.CoreV1Api, cri: CRIClient, name: str, threshold: int) -> float | str:
    """Seconds from memory.available below the threshold to the pod evicted and gone; or why
    there is no figure: "refused" (at admission: its node still under pressure) or "evicted"
    (before the threshold was crossed: the agent acted on figures from before the pod)."""
    crossed: float | None = None
    last_check = 0.0
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        now = time.monotonic()
        if crossed is None and memory_available() < threshold:
            crossed = now
        if now - last_check >= CHECK_SECONDS:
            last_check = now
            state = await _pod_state(core, cri, name)
            if state and crossed is None:
                return state  # refused at admission, or evicted on figures older than the pod
            if state == "evicted":
                return time.monotonic() - crossed
        await asyncio.sleep(SAMPLE_SECONDS)
    pod = await core.read_namespaced_pod(name, NAMESPACE)
    states = [(c.name, c.state.to_dict()) for c in pod.status.container_statuses or []]
    raise TimeoutError(f"{name} not evicted within {RUN_TIMEOUT:.0f}s (threshold crossed: {crossed is not None}, "
                       f"memory.available {memory_available() // MIB}Mi, threshold {threshold // MIB}Mi; pod "
                       f"{pod.status.phase} {pod.status.reason or ''} {pod.status.message or ''} {states})")


async def one_run(agent, api: client.ApiClient, threshold: int, i: int, skipped: list[str]) -> float:
    """One timed eviction. A hog the agent turns away or evicts before it crossed the threshold
    is noted in `skipped`, deleted and tried again."""
    core = client.CoreV1Api(api)
    cri = CRIClient(agent.endpoint, timeout=10)
    try:
        for attempt in range(ADMISSION_ATTEMPTS):
            # The Node's condition can lag the agent's own (the kubelet posts it every 10 s).
            await _wait_no_pressure(core, agent.node_name)
            name = f"hog-{i}-{attempt}"
            size = (memory_available() - threshold) // MIB + OVERSHOOT_MIB
            await core.create_namespaced_pod(NAMESPACE, hog_pod(name, agent.image("busybox"), agent.node_name, size))
            took = await _timed_eviction(core, cri, name, threshold)
            await delete_all(api, agent.endpoint, agent.sandbox_labels, "eviction")
            if not isinstance(took, str):
                return took
            skipped.append(took)
            await asyncio.sleep(5)
        raise TimeoutError(f"{agent.name}: no hog of run {i} was let grow ({', '.join(skipped)})")
    finally:
        await cri.close()
        await delete_all(api, agent.endpoint, agent.sandbox_labels, "eviction")


async def run_agent(agent, api: client.ApiClient, threshold: int, progress) -> dict:
    progress(f"{agent.name}: starting a node with evictionHard memory.available < {threshold // MIB}Mi ...")
    await agent.start()
    await wait_node_ready(api, agent.node_name)
    out: dict = {}
    if agent.name == "pykubelet":
        progress(f"{agent.name}: eviction service CPU while idle, {IDLE_SECONDS:.0f}s ...")
        out["idle"] = await asyncio.to_thread(measure, {"eviction": agent.node.service_pid("eviction")},
                                              IDLE_SECONDS)
    times, failures, skipped = [], [], []
    for i in range(RUNS):
        progress(f"{agent.name}: memory hog {i + 1}/{RUNS} ...")
        try:
            times.append(await one_run(agent, api, threshold, i, skipped))
        except TimeoutError as exc:  # say so in the table, keep measuring
            progress(f"{agent.name}: run {i + 1} failed: {exc}")
            failures.append(str(exc))
    out["reaction"] = summary(times) if times else None
    out["runs"] = [round(t, 3) for t in times]
    out["failures"] = failures
    out["skipped"] = {why: skipped.count(why) for why in sorted(set(skipped))}
    return out


def run(root: Path, progress=print) -> dict:
    (root / "cp").mkdir(parents=True)
    cp = ControlPlane(root / "cp", NODE_NAME)
    results: dict = {}

    async def go():
        api = await k8s(cp.admin_kubeconfig)
        try:
            for make in (lambda t: Pykubelet(root / "pykubelet", cp, config(t)),
                         lambda t: Kubelet(root / "kubelet", cp, config(t))):
                # Set from what is available now, with no agent running: the same rule for both.
                threshold = memory_available() - MARGIN
                agent = make(threshold)
                try:
                    results[agent.name] = {"threshold_mib": threshold // MIB,
                                           **await run_agent(agent, api, threshold, progress)}
                finally:
                    await agent.stop()
        finally:
            await api.close()

    try:
        progress("eviction: starting etcd + kube-apiserver ...")
        cp.start()
        asyncio.run(go())
    finally:
        cp.stop()
    return results


def table(results: dict) -> list[str]:
    py, kube = results.get("pykubelet", {}), results.get("kubelet", {})

    def reaction(r: dict) -> str:
        s = r.get("reaction")
        failed = f" ({len(r['failures'])} failed)" if r.get("failures") else ""
        return (f"{s['p50']:.2f} / {s['p99']:.2f}" if s else "-") + failed

    def skipped(r: dict) -> str:
        return ", ".join(f"{n} {why}" for why, n in (r.get("skipped") or {}).items()) or "0"

    idle = py.get("idle", {}).get("cpu_cores")
    return ["", f"Eviction, cluster mode (evictionHard memory.available; a BestEffort pod grows 50 MiB / 0.2 s; "
                f"{RUNS} runs): memory.available below the threshold -> containers gone and the pod Failed/Evicted",
            f"  {'':<40} {'pykubelet':<16} {KUBELET_LABEL:<16}",
            f"  {'reaction, s, p50 / p99':<40} {reaction(py):<16} {reaction(kube):<16}",
            f"  {'hogs refused or evicted before crossing':<40} {skipped(py):<16} {skipped(kube):<16}",
            f"  {'eviction service CPU while idle, cores':<40} {(f'{idle:.4f}' if idle is not None else '-'):<16} "
            f"{'(in its one process)':<16}"]
