"""Pod startup latency the SIG-scalability way (pod created -> a watch sees it Running), on a
pykubelet node joined to a real kube-apiserver, beside two baselines: the CRI floor (the same
pods started straight through CRI on the same containerd at the same concurrency, no agent) and
the real kubelet 1.20 on the same containerd build and the same API server, run afterwards."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from cri_api.v1 import api_pb2 as cri
from kubernetes_asyncio import client, config, watch

from bench.real_kubelet import NAME as KUBELET_NODE
from bench.real_kubelet import RealKubelet
from bench.stats import summary
from shared.cri import CRIClient
from tests.cluster.harness import ControlPlane
from tests.integration.conftest import NODE_NAME, launch_node, stop_node

NAMESPACE = "default"


def _pod(name: str, image: str, node_name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "startup"}},
            "spec": {"nodeName": node_name, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": image, "command": ["sleep", "3600"]}]}}


async def _k8s(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


async def _startup(api: client.ApiClient, image: str, count: int, rate: float | None, prefix: str,
                   node_name: str = NODE_NAME) -> list[float]:
    """Create `count` pods (all at once, or `rate` a second); return create->Running per pod."""
    core = client.CoreV1Api(api)
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    done = asyncio.Event()

    async def watcher():
        w = watch.Watch()
        async with w:
            async for ev in w.stream(core.list_namespaced_pod, NAMESPACE, label_selector="bench=startup",
                                     timeout_seconds=600):
                p = ev["raw_object"]
                name = p["metadata"]["name"]
                if name.startswith(prefix) and name not in running and p.get("status", {}).get("phase") == "Running":
                    running[name] = time.monotonic()
                    if len(running) == count:
                        done.set()
                        return

    task = asyncio.create_task(watcher())
    await asyncio.sleep(0.5)

    async def create(i: int):
        name = f"{prefix}{i}"
        created[name] = time.monotonic()
        await core.create_namespaced_pod(NAMESPACE, _pod(name, image, node_name))

    if rate is None:
        await asyncio.gather(*(create(i) for i in range(count)))
    else:
        for i in range(count):
            await create(i)
            await asyncio.sleep(1 / rate)
    await asyncio.wait_for(done.wait(), 600)
    task.cancel()
    return [running[n] - created[n] for n in created]


async def _delete_all(api: client.ApiClient, endpoint: str, labels: dict[str, str]) -> float:
    """Delete every bench pod; seconds until all are gone from the API and from containerd."""
    core = client.CoreV1Api(api)
    start = time.monotonic()
    await core.delete_collection_namespaced_pod(NAMESPACE, label_selector="bench=startup")
    c = CRIClient(endpoint)
    try:
        while True:
            pods = await core.list_namespaced_pod(NAMESPACE, label_selector="bench=startup")
            ready = [s for s in await c.list_pod_sandbox(labels) if s.state == cri.SANDBOX_READY]
            if not pods.items and not ready:
                return time.monotonic() - start
            await asyncio.sleep(0.5)
    finally:
        await c.close()


async def _wait_node_ready(api: client.ApiClient, name: str, timeout: float = 180) -> None:
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            node = await core.read_node(name)
            if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
                return
        except client.exceptions.ApiException:
            pass
        await asyncio.sleep(1)
    raise TimeoutError(f"node {name} not Ready after {timeout:.0f}s")


async def _cri_floor(node, image: str, count: int, rate: float | None) -> list[float]:
    """The same pods with no agent: RunPodSandbox + CreateContainer + StartContainer."""
    c = CRIClient(f"unix://{node.root}/containerd/containerd.sock")
    ref = await c.pull_image(image)
    times: list[float] = []
    ids: list[str] = []

    async def one(i: int):
        start = time.monotonic()
        sb_cfg = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=f"floor-{i}", uid=f"floor-{i}-{start}", namespace="bench"),
            hostname=f"floor-{i}", log_directory=str(node.root / "floor-logs" / str(i)),
            linux=cri.LinuxPodSandboxConfig(security_context=cri.LinuxSandboxSecurityContext(
                namespace_options=cri.NamespaceOption(network=cri.POD, pid=cri.CONTAINER, ipc=cri.POD))))
        sid = await c.run_pod_sandbox(sb_cfg)
        ids.append(sid)
        cid = await c.create_container(sid, cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="app"), image=cri.ImageSpec(image=ref),
            command=["sleep", "3600"], log_path="app/0.log"), sb_cfg)
        await c.start_container(cid)
        times.append(time.monotonic() - start)

    try:
        if rate is None:
            await asyncio.gather(*(one(i) for i in range(count)))
        else:
            tasks = []
            for i in range(count):
                tasks.append(asyncio.create_task(one(i)))
                await asyncio.sleep(1 / rate)
            await asyncio.gather(*tasks)
    finally:
        for sid in ids:
            await c.stop_pod_sandbox(sid)
            await c.remove_pod_sandbox(sid)
        await c.close()
    return times


WORKLOADS = [("1 pod", 1, None), ("30 pods at once", 30, None), ("100 pods at 5/s", 100, 5.0)]


def run(progress=print) -> dict:
    root = Path(tempfile.mkdtemp(prefix="pykubelet-bench-startup-"))
    (root / "cp").mkdir()
    (root / "node").mkdir()
    cp = ControlPlane(root / "cp", NODE_NAME)
    node = None
    results: dict = {}
    try:
        progress("pod startup: starting etcd + kube-apiserver and a pykubelet node ...")
        cp.start()
        node = launch_node(root / "node", ["--kubeconfig", str(cp.node_kubeconfig)])
        image = node.image("busybox")

        async def go():
            api = await _k8s(cp.admin_kubeconfig)
            endpoint = f"unix://{node.root}/containerd/containerd.sock"
            managed = {"pykubelet.io/managed": "true"}
            try:
                # Warm the image on the node first: these are warm-image startups.
                await _startup(api, image, 1, None, "warm-")
                await _delete_all(api, endpoint, managed)
                for label, count, rate in WORKLOADS:
                    progress(f"pod startup: {label} through pykubelet ...")
                    agent = await _startup(api, image, count, rate, f"p{count}-")
                    deletion = await _delete_all(api, endpoint, managed)
                    progress(f"pod startup: {label} straight through CRI ...")
                    floor = await _cri_floor(node, image, count, rate)
                    results[label] = {"pykubelet": summary(agent), "cri_floor": summary(floor),
                                      "delete_all_seconds": round(deletion, 2)}
            finally:
                await api.close()
        asyncio.run(go())
        stop_node(node)
        node = None
        asyncio.run(_kubelet_phase(cp, root / "kubelet", results, progress))
        return results
    finally:
        if node is not None:
            stop_node(node)
        cp.stop()


async def _kubelet_phase(cp: ControlPlane, root: Path, results: dict, progress) -> None:
    """The same workloads on the real kubelet, after pykubelet has stopped."""
    kubelet = RealKubelet(root, cp)
    api = await _k8s(cp.admin_kubeconfig)
    try:
        progress("pod startup: starting the real kubelet 1.20 on its own containerd ...")
        await kubelet.start()
        await _wait_node_ready(api, KUBELET_NODE)
        image = kubelet.image("busybox")
        await _startup(api, image, 1, None, "kwarm-", KUBELET_NODE)
        await _delete_all(api, kubelet.endpoint, {})
        for label, count, rate in WORKLOADS:
            progress(f"pod startup: {label} through the real kubelet ...")
            times = await _startup(api, image, count, rate, f"k{count}-", KUBELET_NODE)
            deletion = await _delete_all(api, kubelet.endpoint, {})
            results[label]["kubelet"] = summary(times)
            results[label]["kubelet_delete_all_seconds"] = round(deletion, 2)
    finally:
        await api.close()
        await kubelet.stop()
