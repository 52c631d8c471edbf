"""Run inside the guest: what a node agent wrote into the cgroups of its pods and of the QoS
tiers (systemd driver, cgroup v2), as one JSON object on stdout, so pykubelet's figures and the
kubelet's in the same guest can be compared key by key.

    python -m tests.vm.cgroup_figures <CRI endpoint> <node name> <pod>=<QoS class> ...

A pod is the static pod <pod>-<node name> with one container "app"; the keys name the cgroup and
its file ("pod/guaranteed/memory.max", "container/guaranteed/oom_score_adj", "tier/burstable/
cpu.weight"). Prints {} and exits 3 while a pod or its container is not running yet. The pod
slices' paths come too (under "paths"), for reading their CPU use.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from cri_api.v1 import api_pb2 as cri

from shared.model.cgroup_names import SYSTEMD, container_cgroup, on_host
from shared.runtime.cri import CRIClient

CGROUPS = Path("/sys/fs/cgroup")
TIERS = {"Guaranteed": "", "Burstable": "/burstable", "BestEffort": "/besteffort"}
# What the agents set (or leave) on each level; memory.swap.max is the container's swap (NoSwap: 0).
POD_FILES = ("cpu.weight", "cpu.max", "memory.max", "memory.min", "memory.low", "memory.high", "pids.max")
CONTAINER_FILES = (*POD_FILES, "memory.swap.max")
NODE_FILES = ("cpu.weight", "cpu.max", "memory.max", "memory.min", "memory.low", "pids.max")
NOT_RUNNING = 3


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return "(missing)"


def _oom_score_adj(cgroup: Path) -> str:
    pids = _read(cgroup / "cgroup.procs").split()
    return _read(Path("/proc") / pids[0] / "oom_score_adj") if pids and pids[0].isdigit() else "(no process)"


async def _running(endpoint: str, node: str, names: list[str]) -> dict[str, tuple[str, str]]:
    """{pod name: (pod UID, container ID)} of the pods whose sandbox is ready and "app" runs."""
    client = CRIClient(endpoint)
    try:
        sandboxes = await client.list_pod_sandbox()
        containers = await client.list_containers()
    finally:
        await client.close()
    found = {}
    for name in names:
        full = f"{name}-{node}"
        for s in sandboxes:
            if s.state != cri.SANDBOX_READY or s.labels.get("io.kubernetes.pod.name") != full:
                continue
            app = [c for c in containers if c.pod_sandbox_id == s.id and c.state == cri.CONTAINER_RUNNING
                   and c.labels.get("io.kubernetes.container.name") == "app"]
            if app:
                found[name] = (s.labels["io.kubernetes.pod.uid"], app[0].id)
    return found


def figures(endpoint: str, node: str, pods: dict[str, str]) -> dict[str, object] | None:
    running = asyncio.run(_running(endpoint, node, list(pods)))
    if set(running) != set(pods):
        return None
    out: dict[str, object] = {}
    kubepods = CGROUPS / on_host("/kubepods", SYSTEMD).lstrip("/")
    for f in NODE_FILES:
        out[f"kubepods/{f}"] = _read(kubepods / f)
    for tier in ("burstable", "besteffort"):
        for f in NODE_FILES:
            out[f"tier/{tier}/{f}"] = _read(CGROUPS / on_host(f"/kubepods/{tier}", SYSTEMD).lstrip("/") / f)
    paths = {}
    for name, qos in pods.items():
        uid, container_id = running[name]
        pod = CGROUPS / on_host(f"/kubepods{TIERS[qos]}/pod{uid}", SYSTEMD).lstrip("/")
        container = Path(container_cgroup(str(pod), container_id))
        paths[name] = str(pod)
        for f in POD_FILES:
            out[f"pod/{name}/{f}"] = _read(pod / f)
        for f in CONTAINER_FILES:
            out[f"container/{name}/{f}"] = _read(container / f)
        out[f"container/{name}/oom_score_adj"] = _oom_score_adj(container)
    out["paths"] = paths
    return out


def main(argv: list[str]) -> int:
    endpoint, node, *specs = argv
    pods = dict(spec.split("=", 1) for spec in specs)
    result = figures(endpoint, node, pods)
    print(json.dumps(result or {}))
    return 0 if result is not None else NOT_RUNNING


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
