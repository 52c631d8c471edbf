"""Churn, cluster mode: thousands of pods created and deleted in waves on one node, each agent in
turn on the same control plane (tests/churn.py has the pods: an init container, emptyDir,
configMap and secret volumes, readiness and liveness probes).

Per wave: its pods created at once, seconds from create to Running each (a watch sees it), then
all deleted until gone from the API server and from containerd. Figures: pod start p50/p99 of the
first and the last wave; the RSS of every agent process after the first wave and at the end; and
what the node holds at the end beyond what it held before the first wave (tests/node_inventory.py:
sandboxes, shims, netns, veths, IP leases, NAT chains, mounts, pod directories, cgroups, store
rows, bus subscriptions, open files), after letting idle resources go for up to a minute."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kubernetes_asyncio import client

from bench.agents import Kubelet, Pykubelet
from bench.cluster import create_and_wait, delete_all, k8s, wait_node_ready
from bench.stats import summary
from shared.host.cni import cni_ipam_dir
from tests.churn import NAMESPACE, churn_pod, config_objects
from tests.cluster.harness import KUBELET_LABEL, ControlPlane
from tests.integration.conftest import NODE_NAME
from tests.node_inventory import Agent, Inventory, bus_subscriptions, take

LABEL = "churn"
SETTLE_SECONDS = 60  # idle gRPC threads and pooled connections close after 30 s
FD_SLACK = 4


def where(agent) -> Agent:
    """What tests/node_inventory.py counts for this agent."""
    if isinstance(agent, Pykubelet):
        subs = bus_subscriptions({service: agent.get_text(url) for service, url in agent.metrics_urls().items()})
        root = agent.node.root
        return Agent(endpoint=agent.endpoint, root=root, pods_dir=root / "pods", ipam_dir=cni_ipam_dir(root),
                     store=root / "state.db", pids=agent.pids(), bus_subscriptions=subs)
    return Agent(endpoint=agent.endpoint, root=agent.root, pods_dir=agent.root / "kubelet" / "pods",
                 ipam_dir=cni_ipam_dir(agent.root), pids=agent.pids())


async def inventory(agent) -> Inventory:
    return await asyncio.to_thread(lambda: take(where(agent)))


async def settle(agent, before: Inventory) -> tuple[Inventory, dict]:
    """The inventory once nothing is left beyond `before`, or after SETTLE_SECONDS with what is."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        now = await inventory(agent)
        grown = now.grown(before, fd_slack=FD_SLACK)
        if not grown or time.monotonic() > deadline:
            return now, grown
        await asyncio.sleep(2)


async def run_agent(agent, api: client.ApiClient, pods: int, wave_size: int, progress) -> dict:
    progress(f"{agent.label}: churn: starting a node joined to the API server ...")
    await agent.start()
    await wait_node_ready(api, agent.node_name)
    image = agent.image("busybox")
    # One pod first, so the image is pulled and every first-time cost is paid before the baseline.
    warm = churn_pod("churn-warm", image, agent.node_name)
    warm["metadata"]["labels"] = {"bench": LABEL}
    await create_and_wait(api, [warm], None, LABEL)
    await delete_all(api, agent.endpoint, agent.sandbox_labels, LABEL)
    before, _ = await settle(agent, await inventory(agent))
    waves = max(1, pods // wave_size)
    started, starts, deletes = time.monotonic(), [], []
    rss_after_first: dict[str, float] = {}
    for wave in range(waves):
        manifests = []
        for i in range(wave_size):
            pod = churn_pod(f"churn-{wave}-{i}", image, agent.node_name)
            pod["metadata"]["labels"] = {"bench": LABEL}
            manifests.append(pod)
        starts.append(await create_and_wait(api, manifests, None, LABEL))
        deletes.append(await delete_all(api, agent.endpoint, agent.sandbox_labels, LABEL))
        if wave == 0:
            rss_after_first = (await inventory(agent)).rss_mib
        if wave == 0 or (wave + 1) % 10 == 0 or wave == waves - 1:
            first, last = summary(starts[0]), summary(starts[-1])
            progress(f"{agent.label}: churn: wave {wave + 1}/{waves} ({(wave + 1) * wave_size} pods, "
                     f"{time.monotonic() - started:.0f}s): start p99 {last['p99']:.2f}s (first wave "
                     f"{first['p99']:.2f}s), delete {deletes[-1]:.1f}s")
    wall = time.monotonic() - started
    progress(f"{agent.label}: churn: waiting up to {SETTLE_SECONDS}s for the node to give back what is left ...")
    end, grown = await settle(agent, before)
    return {"pods": waves * wave_size, "waves": waves, "wave_size": wave_size, "wall_seconds": round(wall, 1),
            "first_wave": summary(starts[0]), "last_wave": summary(starts[-1]),
            "all_waves": summary([t for w in starts for t in w]),
            "delete_wave_p50_s": summary(deletes)["p50"],
            "rss_mib_after_first_wave": {k: round(v, 1) for k, v in rss_after_first.items()},
            "rss_mib_at_end": {k: round(v, 1) for k, v in end.rss_mib.items()},
            "left_behind": {k: list(v) for k, v in grown.items()},
            "counts_before": before.counts, "counts_at_end": end.counts}


def run(root: Path, pods: int, wave_size: int, progress=print) -> dict:
    (root / "cp").mkdir(parents=True)
    cp = ControlPlane(root / "cp", NODE_NAME)
    results: dict = {}

    async def go():
        api = await k8s(cp.admin_kubeconfig)
        core = client.CoreV1Api(api)
        try:
            cm, secret = config_objects()
            await core.create_namespaced_config_map(NAMESPACE, cm)
            await core.create_namespaced_secret(NAMESPACE, secret)
            for agent in (Pykubelet(root / "pykubelet", cp), Kubelet(root / "kubelet", cp)):
                try:
                    results[agent.label] = await run_agent(agent, api, pods, wave_size, progress)
                finally:
                    await agent.stop()
        finally:
            await api.close()

    try:
        progress("churn: starting etcd + kube-apiserver ...")
        cp.start()
        asyncio.run(go())
        return results
    finally:
        cp.stop()


def table(out: dict) -> list[str]:
    py, kube = out.get("pykubelet", {}), out.get("kubelet", {})
    any_ = py or kube
    lines = ["", f"Churn, cluster mode: {any_['pods']} pods created and deleted in {any_['waves']} waves of "
                 f"{any_['wave_size']} (init container, emptyDir + configMap + secret volumes, probes)",
             f"  {'':<40} {'pykubelet':>26} {KUBELET_LABEL:>26}"]

    def row(label: str, fn) -> None:
        lines.append(f"  {label:<40} {fn(py) if py else '-':>26} {fn(kube) if kube else '-':>26}")

    def drift(r: dict) -> str:
        first, last = r["first_wave"]["p99"], r["last_wave"]["p99"]
        return f"{first:.2f} -> {last:.2f} ({(last / first - 1) * 100:+.0f}%)"

    row("wall time", lambda r: f"{r['wall_seconds']:.0f} s")
    row("pod start p50, all waves (s)", lambda r: f"{r['all_waves']['p50']:.2f}")
    row("pod start p99, first -> last wave (s)", drift)
    row("delete a wave, p50 (s)", lambda r: f"{r['delete_wave_p50_s']:.1f}")
    row("left behind at the end", lambda r: ", ".join(f"{k} {a}->{b}" for k, (a, b) in r["left_behind"].items())
        or "nothing")
    names = list(py.get("rss_mib_at_end", {})) + list(kube.get("rss_mib_at_end", {}))
    lines.append("  RSS after the first wave -> at the end (MiB)")
    for name in names:
        r = py if name in py.get("rss_mib_at_end", {}) else kube
        a, b = r["rss_mib_after_first_wave"].get(name, float("nan")), r["rss_mib_at_end"][name]
        cell = f"{a:.1f} -> {b:.1f} ({(b / a - 1) * 100:+.0f}%)"
        lines.append(f"    {name:<38} {cell if r is py else '':>26} {cell if r is kube else '':>26}")
    return lines
