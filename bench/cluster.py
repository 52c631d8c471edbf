"""Cluster mode: a real etcd + kube-apiserver; each agent in turn joins it as a node and runs the
same workloads, created through the API with spec.nodeName set (no scheduler).

Per agent (maxPods 250): pod startup the SIG-scalability way (created -> a watch sees Running,
warm image) for one pod, 30 at once, 100 at 5/s and 250 at 10/s, each followed by deleting them
all (until gone from the API and from containerd); steady-state CPU and PSS at 0, 30, 100 and 250
running pods; the probe load; the kubelet API (bench/node_api.py: kubectl logs and exec,
stats/summary with 100 and with 250 pods). For
pykubelet also the CRI floor (the same pods straight through CRI on its containerd, at the
same concurrency) and what the bus and store did during the 100-pod startup. The agents run one
after the other, each on its own containerd from the same build and config: two agents on one
containerd would remove each other's pods."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from cri_api.v1 import api_pb2 as cri
from kubernetes_asyncio import client, config, watch

from bench import node_api, prom
from bench.agents import Kubelet, Pykubelet
from bench.probe_load import CONTAINERS, PODS, Targets, probe_pod
from bench.stats import summary, time_wait_to_ports
from bench.steady_state import CpuWindow, measure
from shared.runtime.cri import CRIClient
from tests.cluster.harness import ControlPlane
from tests.integration.conftest import NODE_NAME

NAMESPACE = "default"
# Every request has a deadline: the client has none by default, and a request whose answer is lost
# would hold a benchmark for ever (seen once in a 1,000-pod churn: a create never answered).
REQUEST_TIMEOUT = 60
WORKLOADS = [("1 pod", 1, None), ("30 pods at once", 30, None), ("100 pods at 5/s", 100, 5.0),
             ("250 pods at 10/s", 250, 10.0)]
STEADY_AT = (30, 100, 250)  # besides 0: measured while these workloads' pods run
STATS_AT = (100, 250)  # the kubelet API's stats/summary is timed while these workloads' pods run
# Both agents take 250 pods (the kubelet's default is 110); the pod CIDR, a /24, has 253 addresses.
MAX_PODS = 250


def pod_manifest(name: str, image: str, node_name: str | None, label: str = "startup") -> dict:
    spec = {"terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": image, "command": ["sleep", "3600"]}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": label}}, "spec": spec}


async def k8s(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


def _running(p: dict) -> bool:
    return p.get("status", {}).get("phase") == "Running"


def _ready(p: dict) -> bool:
    return _running(p) and any(c["type"] == "Ready" and c["status"] == "True"
                               for c in p["status"].get("conditions") or [])


async def _create_pod(core: client.CoreV1Api, pod: dict) -> None:
    for attempt in range(3):
        try:
            await core.create_namespaced_pod(NAMESPACE, pod, _request_timeout=REQUEST_TIMEOUT)
            return
        except client.exceptions.ApiException as exc:
            if exc.status == 409 and attempt:  # the timed-out attempt went through
                return
            raise
        except asyncio.TimeoutError:
            print(f"bench: creating pod {pod['metadata']['name']} timed out; again", flush=True)
    raise TimeoutError(f"pod {pod['metadata']['name']} not created in 3 attempts")


async def create_and_wait(api: client.ApiClient, pods: list[dict], rate: float | None, label: str,
                          done_when=_running, timeout: float = 600) -> list[float]:
    """Create the pods (all at once, or `rate` a second); seconds from create to `done_when` each."""
    core = client.CoreV1Api(api)
    names = {p["metadata"]["name"] for p in pods}
    created: dict[str, float] = {}
    reached: dict[str, float] = {}
    done = asyncio.Event()

    def seen(p: dict) -> None:
        name = p["metadata"]["name"]
        if name in names and name not in reached and done_when(p):
            reached[name] = time.monotonic()
            if len(reached) == len(names):
                done.set()

    async def watcher():
        # A watch that ends early or fails (a dropped or timed-out connection) is caught up with a
        # list and started again: a pod that got there meanwhile counts from the list (later than
        # it was).
        while not done.is_set():
            try:
                w = watch.Watch()
                async with w:
                    async for ev in w.stream(core.list_namespaced_pod, NAMESPACE, label_selector=f"bench={label}",
                                             timeout_seconds=int(timeout)):
                        seen(ev["raw_object"])
                        if done.is_set():
                            return
            except Exception as exc:  # aiohttp's and the client's errors alike
                print(f"bench: the pod watch ended ({exc!r}); listing and watching again", flush=True)
                await asyncio.sleep(1)
            listed = await core.list_namespaced_pod(NAMESPACE, label_selector=f"bench={label}",
                                                    _request_timeout=REQUEST_TIMEOUT)
            for pod in api.sanitize_for_serialization(listed.items):
                seen(pod)

    task = asyncio.create_task(watcher(), name="bench:watch")
    await asyncio.sleep(0.5)

    async def create(p: dict):
        created[p["metadata"]["name"]] = time.monotonic()
        await _create_pod(core, p)

    try:
        if rate is None:
            await asyncio.gather(*(create(p) for p in pods))
        else:
            for p in pods:
                await create(p)
                await asyncio.sleep(1 / rate)
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        task.cancel()
    return [reached[n] - created[n] for n in created]


async def delete_all(api: client.ApiClient, endpoint: str, sandbox_labels: dict[str, str], label: str) -> float:
    """Delete the bench pods; seconds until all are gone from the API and from containerd."""
    core = client.CoreV1Api(api)
    start = time.monotonic()
    await core.delete_collection_namespaced_pod(NAMESPACE, label_selector=f"bench={label}",
                                                _request_timeout=REQUEST_TIMEOUT)
    c = CRIClient(endpoint)
    try:
        while time.monotonic() - start < 300:
            pods = await core.list_namespaced_pod(NAMESPACE, label_selector=f"bench={label}",
                                                  _request_timeout=REQUEST_TIMEOUT)
            ready = [s for s in await c.list_pod_sandbox(sandbox_labels) if s.state == cri.SANDBOX_READY]
            if not pods.items and not ready:
                return time.monotonic() - start
            await asyncio.sleep(0.5)
        raise TimeoutError("bench pods not gone after 300s")
    finally:
        await c.close()


async def wait_node_ready(api: client.ApiClient, name: str, timeout: float = 180) -> None:
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            node = await core.read_node(name, _request_timeout=REQUEST_TIMEOUT)
            if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
                return
        except client.exceptions.ApiException:
            pass
        await asyncio.sleep(1)
    raise TimeoutError(f"node {name} not Ready after {timeout:.0f}s")


async def cri_floor(endpoint: str, log_root: Path, image: str, count: int, rate: float | None) -> list[float]:
    """The same pods with no agent: RunPodSandbox + CreateContainer + StartContainer."""
    c = CRIClient(endpoint)
    ref = await c.pull_image(image)
    times: list[float] = []
    ids: list[str] = []

    async def one(i: int):
        start = time.monotonic()
        sb_cfg = cri.PodSandboxConfig(
            metadata=cri.PodSandboxMetadata(name=f"floor-{i}", uid=f"floor-{i}-{start}", namespace="bench"),
            hostname=f"floor-{i}", log_directory=str(log_root / str(i)),
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


def scrape(agent) -> dict[str, prom.Samples]:
    return {name: prom.parse(agent.get_text(url)) for name, url in agent.metrics_urls().items()}


def bus_and_store(before: dict[str, prom.Samples], after: dict[str, prom.Samples], seconds: float) -> dict:
    """What pykubelet's event bus and state store did between two scrapes of every service."""
    subjects = sorted({dict(labels)["subject"] for samples in after.values() for (n, labels) in samples
                       if n == "pykubelet_bus_delivery_seconds_count"})
    bus = {}
    for subject in subjects:
        delivery: dict[float, float] = {}
        handler: dict[float, float] = {}
        for svc in after:
            for le, v in prom.histogram_delta(before[svc], after[svc], "pykubelet_bus_delivery_seconds",
                                              subject=subject).items():
                delivery[le] = delivery.get(le, 0.0) + v
            for le, v in prom.histogram_delta(before[svc], after[svc], "pykubelet_bus_handler_seconds",
                                              subject=subject).items():
                handler[le] = handler.get(le, 0.0) + v
        count = delivery.get(float("inf"), 0.0)
        if count:
            per_subscriber = {}
            for svc in after:
                d = prom.histogram_delta(before[svc], after[svc], "pykubelet_bus_delivery_seconds", subject=subject)
                if d.get(float("inf")):
                    per_subscriber[svc] = {"deliveries": int(d[float("inf")]),
                                           "delivery_p99_s": prom.quantile(d, 0.99)}
            bus[subject.removeprefix("pykubelet.v1.")] = {
                "deliveries": int(count), "delivery_p50_s": prom.quantile(delivery, 0.5),
                "delivery_p99_s": prom.quantile(delivery, 0.99), "handler_p99_s": prom.quantile(handler, 0.99),
                "slowest_subscriber": max(per_subscriber, key=lambda s: per_subscriber[s]["delivery_p99_s"]),
                "per_subscriber": per_subscriber}
    store = {}
    for svc in after:
        b = prom.histogram_delta(before[svc], after[svc], "pykubelet_store_write_seconds")
        count = b.get(float("inf"), 0.0)
        if count:
            store[svc] = {"writes": int(count), "writes_per_second": round(count / seconds, 1),
                          "commit_p50_s": prom.quantile(b, 0.5), "commit_p99_s": prom.quantile(b, 0.99)}
    return {"seconds": round(seconds, 1), "bus": bus, "store": store}


def api_requests(before: dict[str, prom.Samples], after: dict[str, prom.Samples], seconds: float) -> dict:
    """Requests the agent sent the API server between two scrapes: every one passes its client-side
    rate limiter (kubeAPIQPS / kubeAPIBurst), whose histogram both agents export."""
    name = "rest_client_rate_limiter_duration_seconds"
    waits: dict[float, float] = {}
    for src in after:
        for le, v in prom.histogram_delta(before[src], after[src], name).items():
            waits[le] = waits.get(le, 0.0) + v
    count = waits.get(float("inf"), 0.0)
    return {"seconds": round(seconds, 1), "requests": int(count), "per_second": round(count / seconds, 1),
            "limiter_wait_p99_s": prom.quantile(waits, 0.99) if count else 0.0}


def _probe_totals(samples: dict[str, prom.Samples]) -> tuple[float, float]:
    ok = sum(prom.total(s, "prober_probe_total", result="successful") for s in samples.values())
    failed = sum(prom.total(s, "prober_probe_total", result="failed") for s in samples.values())
    return ok, failed


async def probe_load(agent, api, targets: Targets, seconds: float, progress) -> dict:
    image = agent.image("busybox")
    pods = [probe_pod(i, image, agent.node_name, targets) for i in range(PODS)]
    progress(f"{agent.name}: probe load: {PODS} pods x {CONTAINERS} containers x 2 probes/s, starting them ...")
    await create_and_wait(api, pods, None, "probes", done_when=_ready, timeout=900)
    await asyncio.sleep(5)
    progress(f"{agent.name}: probe load: {PODS * CONTAINERS * 2} probes/s for {seconds:.0f}s ...")
    before, t0 = scrape(agent), time.monotonic()
    window = CpuWindow(agent.pids())
    await asyncio.sleep(seconds)
    cost = window.stop()
    after, t1 = scrape(agent), time.monotonic()
    ok0, failed0 = _probe_totals(before)
    ok1, failed1 = _probe_totals(after)
    tw = time_wait_to_ports({targets.http_port, targets.tcp_port})
    deletion = await delete_all(api, agent.endpoint, agent.sandbox_labels, "probes")
    return {"pods": PODS, "containers": PODS * CONTAINERS, "seconds": cost["seconds"],
            "probes_per_second": round((ok1 - ok0 + failed1 - failed0) / (t1 - t0), 1),
            "cpu_cores": cost["cpu_cores"], "pss_mib": cost["pss_mib"],
            "spurious_failures": int(failed1 - failed0), "time_wait_sockets": tw,
            "delete_all_seconds": round(deletion, 2), "per_process": cost["per_process"]}


async def node_api_logs_exec(agent, api, cp: ControlPlane, progress) -> dict:
    """kubectl logs and exec through the API server, on a pod of their own that is removed after."""
    pod = "node-api-logs"
    await create_and_wait(api, [node_api.log_pod(pod, agent.image("busybox"), agent.node_name)], None,
                          "node-api")
    try:
        progress(f"{agent.name}: kubelet API: kubectl logs of a {node_api.LOG_BYTES // 2**20} MiB log "
                 f"x{node_api.LOG_RUNS} ...")
        logs = await asyncio.to_thread(node_api.logs_throughput, cp, pod)
        progress(f"{agent.name}: kubelet API: kubectl exec -- true x{node_api.EXEC_RUNS} ...")
        exec_ = await asyncio.to_thread(node_api.exec_round_trip, cp, pod)
    finally:
        await delete_all(api, agent.endpoint, agent.sandbox_labels, "node-api")
    return {"logs": logs, "exec": exec_}


ALL_PHASES = frozenset({"startup", "floor", "bus", "steady", "probe", "node-api", "stats"})
# What each agent is measured on. pykubelet's exec'd layout (every service an interpreter of its
# own, as the systemd units start them without pykubelet-preload.service) only for its
# steady-state cost: everything else is the same code.
PHASES = {"pykubelet": ALL_PHASES, "pykubelet-exec": frozenset({"steady"}),
          "kubelet": ALL_PHASES - {"floor", "bus"}}
ONLY = {"node-api": frozenset({"node-api", "stats"}), "footprint": frozenset({"steady", "probe"}),
        "scale": frozenset({"startup", "floor", "steady", "stats"})}
# --only scale: the 250-pod workload alone.
ONLY_WORKLOADS = {"scale": {"250 pods at 10/s"}}


async def run_agent(agent, api, cp: ControlPlane, steady_seconds: float, probe_seconds: float, targets: Targets,
                    progress, phases: frozenset[str], workloads: set[str] | None = None) -> dict:
    """The phases asked for. The workloads' pods are started whenever a phase needs them running
    (steady state at 30 and 100 pods, stats/summary at 100)."""
    progress(f"{agent.label}: starting a node joined to the API server ...")
    await agent.start()
    await wait_node_ready(api, agent.node_name)
    image = agent.image("busybox")
    out: dict = {}
    await create_and_wait(api, [pod_manifest("warm", image, agent.node_name)], None, "startup")
    await delete_all(api, agent.endpoint, agent.sandbox_labels, "startup")
    if "steady" in phases:
        progress(f"{agent.label}: steady state with 0 pods for {steady_seconds:.0f}s ...")
        out.setdefault("steady", {})["0"] = await asyncio.to_thread(measure, agent.pids(), steady_seconds)
    for label, count, rate in WORKLOADS:
        if workloads is not None and label not in workloads:
            continue
        steady = "steady" in phases and count in STEADY_AT
        stats = "stats" in phases and count in STATS_AT
        if not ("startup" in phases or steady or stats):
            continue
        progress(f"{agent.label}: pod startup, {label} ...")
        pods = [pod_manifest(f"s{count}-{i}", image, agent.node_name) for i in range(count)]
        bus = "bus" in phases and count == 100
        before, t0 = (scrape(agent), time.monotonic()) if bus or count == MAX_PODS else (None, 0.0)
        times = await create_and_wait(api, pods, rate, "startup")
        result = {"startup": summary(times)}
        if before is not None:
            after = scrape(agent)
            if bus:
                out["bus_store_100_pods"] = bus_and_store(before, after, time.monotonic() - t0)
            else:
                result["api_requests"] = api_requests(before, after, time.monotonic() - t0)
        if steady or stats:
            await asyncio.sleep(5)  # let the start-up work drain
        if steady:
            progress(f"{agent.label}: steady state with {count} pods for {steady_seconds:.0f}s ...")
            out.setdefault("steady", {})[str(count)] = await asyncio.to_thread(measure, agent.pids(), steady_seconds)
        if stats:  # after the steady-state window, which it would disturb
            out.setdefault("node_api", {})[f"stats_summary_{count}_pods"] = await node_api.stats_summary_latency(
                cp, api, agent, progress)
        result["delete_all_seconds"] = round(await delete_all(api, agent.endpoint, agent.sandbox_labels,
                                                              "startup"), 2)
        if "startup" not in phases:
            continue
        if "floor" in phases:
            progress(f"{agent.label}: {label} straight through CRI (the floor) ...")
            floor = await cri_floor(agent.endpoint, agent.root / "floor-logs", image, count, rate)
            result["cri_floor"] = summary(floor)
        out.setdefault("startup", {})[label] = result
    if "probe" in phases:
        out["probe_load"] = await probe_load(agent, api, targets, probe_seconds, progress)
    if "node-api" in phases:
        out.setdefault("node_api", {}).update(await node_api_logs_exec(agent, api, cp, progress))
    return out


def run(root: Path, steady_seconds: float, probe_seconds: float, progress=print, only: str | None = None) -> dict:
    (root / "cp").mkdir(parents=True)
    cp = ControlPlane(root / "cp", NODE_NAME)
    targets = Targets()
    results: dict = {}

    async def go():
        api = await k8s(cp.admin_kubeconfig)
        limit = f"maxPods: {MAX_PODS}\n"
        agents = [Pykubelet(root / "pykubelet", cp, limit),
                  Pykubelet(root / "pykubelet-exec", cp, limit, exec_services=True),
                  Kubelet(root / "kubelet", cp, limit)]
        try:
            for agent in agents:
                phases = PHASES[agent.label] & ONLY.get(only, ALL_PHASES)
                if not phases:
                    continue
                try:
                    results[agent.label] = await run_agent(agent, api, cp, steady_seconds, probe_seconds, targets,
                                                           progress, phases, ONLY_WORKLOADS.get(only))
                finally:
                    await agent.stop()
        finally:
            await api.close()

    try:
        progress("cluster mode: starting etcd + kube-apiserver ...")
        cp.start()
        asyncio.run(go())
        return results
    finally:
        targets.close()
        cp.stop()
