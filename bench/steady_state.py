"""Steady-state cost: CPU (cores) and memory (PSS, so shared pages count once) of all pykubelet
processes plus their NATS while 0, 30 and 100 static pods just run. containerd is excluded."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from bench.stats import cpu_seconds
from tests.integration.conftest import PYKUBELET, REPO, SERVICES, launch_node, stop_node, wait_for

MEASURED = [*SERVICES, "nats"]


def pss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def _pods_running(node, count: int) -> bool:
    res = subprocess.run([*PYKUBELET, "status", "-o", "json", "--root-dir", str(node.root)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    pods = json.loads(res.stdout)["pods"] if res.returncode == 0 else []
    return sum(p["phase"] == "Running" for p in pods) >= count


def measure(node, seconds: float) -> dict:
    pids = {name: node.service_pid(name) for name in MEASURED}
    cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    cpu = {n: (cpu_seconds(p) - cpu0[n]) / elapsed for n, p in pids.items()}
    pss = {n: pss_bytes(p) for n, p in pids.items()}
    return {"cpu_cores": round(sum(cpu.values()), 4), "pss_mib": round(sum(pss.values()) / 2**20, 1),
            "per_process": {n: {"cpu_cores": round(cpu[n], 4), "pss_mib": round(pss[n] / 2**20, 1)}
                            for n in MEASURED}}


def run(counts=(0, 30, 100), seconds: float = 60, progress=print) -> dict:
    root = Path(tempfile.mkdtemp(prefix="pykubelet-bench-steady-"))
    node = launch_node(root)
    results = {}
    try:
        for count in counts:
            for i in range(count):
                node.write(f"steady-{i}.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: steady-{i}}}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{{name: app, image: "{node.image('busybox')}", command: ["sleep", "3600"]}}]
""")
            wait_for(lambda: _pods_running(node, count), 300, f"{count} pods running", interval=2)
            progress(f"steady state: {count} pods running; measuring for {seconds:.0f}s ...")
            time.sleep(5)  # let the start-up work drain
            results[str(count)] = measure(node, seconds)
            for i in range(count):
                node.remove(f"steady-{i}.yaml")
            wait_for(lambda: json.loads(node.cli("status", "-o", "json").stdout)["pods"] == [], 300,
                     "pods removed", interval=2)
        return results
    finally:
        stop_node(node)
