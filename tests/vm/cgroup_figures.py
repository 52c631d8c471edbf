"""Run inside the guest: what a node agent wrote into the cgroups of its pods and of the QoS
tiers (systemd driver, cgroup v2 or v1), as one JSON object on stdout, so pykubelet's figures and
the kubelet's in the same guest can be compared key by key.

    python -m tests.vm.cgroup_figures <CRI endpoint> <node name> <pod>=<QoS class> ...

A pod is the static pod <pod>-<node name> with one container "app"; the keys name the cgroup and
its file ("pod/guaranteed/memory.max", "container/guaranteed/oom_score_adj", "tier/burstable/
cpu.weight"; on v1 the file names are v1's, "pod/guaranteed/memory.limit_in_bytes"). Prints {}
and exits 3 while a pod or its container is not running yet. The pod slices' paths come too
(under "paths"; v1: in the cpuacct tree), for reading their CPU use.
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
# cgroup v1: each file in its controller's tree.
V1_POD_FILES = ("cpu/cpu.shares", "cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us", "memory/memory.limit_in_bytes",
                "pids/pids.max")
V1_CONTAINER_FILES = (*V1_POD_FILES, "memory/memory.memsw.limit_in_bytes", "memory/memory.swappiness")
V1_NODE_FILES = ("cpu/cpu.shares", "cpu/cpu.cfs_quota_us", "memory/memory.limit_in_bytes", "pids/pids.max")
NOT_RUNNING = 3


class Layout:
    """Where a cgroup's files are: one tree (v2), or a tree per controller (v1)."""

    def __init__(self, root: Path = CGROUPS) -> None:
        self.root = root
        self.v2 = (root / "cgroup.controllers").is_file()
        self.pod_files = POD_FILES if self.v2 else V1_POD_FILES
        self.container_files = CONTAINER_FILES if self.v2 else V1_CONTAINER_FILES
        self.node_files = NODE_FILES if self.v2 else V1_NODE_FILES

    def file(self, cgroup: str, name: str) -> Path:
        """name: "cpu.weight" (v2) or "cpu/cpu.shares" (v1)."""
        if self.v2:
            return self.root / cgroup.lstrip("/") / name
        controller, file = name.split("/")
        return self.root / controller / cgroup.lstrip("/") / file

    def cpu_dir(self, cgroup: str) -> Path:
        return self.root / ("" if self.v2 else "cpuacct") / cgroup.lstrip("/")


def _key(name: str) -> str:
    return name.split("/")[-1]


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


def figures(endpoint: str, node: str, pods: dict[str, str], layout: Layout | None = None) -> dict[str, object] | None:
    running = asyncio.run(_running(endpoint, node, list(pods)))
    if set(running) != set(pods):
        return None
    at = layout or Layout()
    out: dict[str, object] = {}
    kubepods = on_host("/kubepods", SYSTEMD)
    for f in at.node_files:
        out[f"kubepods/{_key(f)}"] = _read(at.file(kubepods, f))
    for tier in ("burstable", "besteffort"):
        for f in at.node_files:
            out[f"tier/{tier}/{_key(f)}"] = _read(at.file(on_host(f"/kubepods/{tier}", SYSTEMD), f))
    paths = {}
    for name, qos in pods.items():
        uid, container_id = running[name]
        pod = on_host(f"/kubepods{TIERS[qos]}/pod{uid}", SYSTEMD)
        container = container_cgroup(pod, container_id)
        paths[name] = str(at.cpu_dir(pod))
        for f in at.pod_files:
            out[f"pod/{name}/{_key(f)}"] = _read(at.file(pod, f))
        for f in at.container_files:
            out[f"container/{name}/{_key(f)}"] = _read(at.file(container, f))
        out[f"container/{name}/oom_score_adj"] = _oom_score_adj(at.cpu_dir(container))
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
