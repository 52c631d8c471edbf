"""The kubelet API as its users meet it, measured the same way on each agent (cluster mode).

- `kubectl logs` of a 50 MiB log, through the API server: a pod writes 50 MiB to stdout (100-byte
  lines) and an end marker, then sleeps; once the marker is in the log, `kubectl logs POD` is
  timed three times with its output counted. MB/s = 10^6 bytes/s of log content received.
  Both agents run with containerLogMaxSize 100Mi so the current log file holds it all (the CRI
  file is about 70 MiB with its per-line timestamp prefixes).
- exec round trip: `kubectl exec POD -- true`, 50 times one after the other (kubectl's own start
  included, the same for both agents).
- `/stats/summary` with 100 pods running: 20 GETs straight to the node's kubelet API (its
  InternalIP and the port in Node.status.daemonEndpoints) over one kept-alive connection with the
  API server's kubelet client certificate, as the API server or a metrics scraper would call it,
  after one warm-up request (its authorization review is then cached on both agents).
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import threading
import time

import httpx
from kubernetes_asyncio import client

from bench.stats import percentile
from tests.cluster.harness import KUBE_BIN, ControlPlane

NAMESPACE = "default"
LOG_BYTES = 50 * 2**20
LINE = "a" * 99  # + newline: 100-byte lines, 524288 of them
MARKER = "log-complete"
LOG_EXPECTED = LOG_BYTES + len(MARKER) + 1
LOG_RUNS, EXEC_RUNS, STATS_RUNS = 3, 50, 20
# In the containers' log files: the content plus a ~40-byte CRI prefix per line, below this.
CONTAINER_LOG_MAX_SIZE = "100Mi"


def log_pod(name: str, image: str, node_name: str) -> dict:
    script = f"yes {LINE} | head -c {LOG_BYTES}; echo {MARKER}; exec sleep 3600"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "node-api"}},
            "spec": {"nodeName": node_name, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": image, "command": ["sh", "-c", script]}]}}


def _kubectl(cp: ControlPlane) -> list[str]:
    return [str(KUBE_BIN / "kubectl"), f"--kubeconfig={cp.admin_kubeconfig}", "-n", NAMESPACE]


def _counted(argv: list[str], timeout: float) -> tuple[int, float, int, str]:
    """Run a command with its stdout counted and thrown away: (bytes, seconds, exit code, stderr)."""
    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        n = 0
        try:
            while chunk := proc.stdout.read1(1 << 20):
                n += len(chunk)
            code = proc.wait()
        finally:
            killer.cancel()
            proc.stdout.close()
        seconds = time.monotonic() - start
        err.seek(0)
        return n, seconds, code, err.read().decode(errors="replace")[-500:]


def _wait_log_complete(cp: ControlPlane, pod: str, timeout: float = 300) -> float:
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        res = subprocess.run([*_kubectl(cp), "logs", pod, "--tail=1"], capture_output=True, text=True, timeout=60)
        last = res.stdout.strip() or res.stderr.strip()
        if last == MARKER:
            return time.monotonic() - start
        time.sleep(1)
    raise TimeoutError(f"pod {pod}: log marker not seen after {timeout:.0f}s (last: {last[:200]!r})")


def logs_throughput(cp: ControlPlane, pod: str) -> dict:
    written = _wait_log_complete(cp, pod)
    runs = []
    for _ in range(LOG_RUNS):
        n, seconds, code, err = _counted([*_kubectl(cp), "logs", pod], timeout=300)
        runs.append({"bytes": n, "seconds": round(seconds, 3), "mb_per_s": round(n / seconds / 1e6, 1),
                     **({"exit_code": code, "stderr": err} if code else {})})
    rates = [r["mb_per_s"] for r in runs]
    return {"log_bytes": LOG_EXPECTED, "complete": all(r["bytes"] == LOG_EXPECTED for r in runs),
            "best_mb_per_s": max(rates), "median_mb_per_s": percentile(rates, 50),
            "seconds_until_written": round(written, 1), "runs": runs}


def exec_round_trip(cp: ControlPlane, pod: str) -> dict:
    times, failures, last_error = [], 0, ""
    for _ in range(EXEC_RUNS):
        start = time.monotonic()
        res = subprocess.run([*_kubectl(cp), "exec", pod, "--", "true"], capture_output=True, text=True, timeout=60)
        if res.returncode == 0:
            times.append(time.monotonic() - start)
        else:
            failures, last_error = failures + 1, res.stderr.strip()[-500:]
    return {"n": len(times), "p50": percentile(times, 50), "p99": percentile(times, 99), "failures": failures,
            **({"last_error": last_error} if failures else {})}


async def kubelet_endpoint(api: client.ApiClient, node_name: str) -> str:
    """Where the API server reaches the node: its InternalIP and advertised kubelet port."""
    node = await client.CoreV1Api(api).read_node(node_name)
    address = next(a.address for a in node.status.addresses if a.type == "InternalIP")
    return f"https://{address}:{node.status.daemon_endpoints.kubelet_endpoint.port}"


def _stats_summary(base: str, cert: tuple[str, str]) -> dict:
    times, sizes, pods = [], [], []
    # The agents' serving certificates are self-signed: not verified (nor does the API server here).
    with httpx.Client(verify=False, cert=cert, timeout=60) as http:
        http.get(base + "/stats/summary").raise_for_status()  # warm-up: connection, authorization cache
        for _ in range(STATS_RUNS):
            start = time.monotonic()
            resp = http.get(base + "/stats/summary")
            resp.raise_for_status()
            times.append(time.monotonic() - start)
            sizes.append(len(resp.content))
            pods.append(len(resp.json().get("pods") or []))
    return {"n": len(times), "p50": percentile(times, 50), "p99": percentile(times, 99),
            "response_bytes": max(sizes), "pods_in_summary": min(pods)}


async def stats_summary_latency(cp: ControlPlane, api: client.ApiClient, agent, progress) -> dict:
    progress(f"{agent.name}: kubelet API: stats/summary x{STATS_RUNS} ...")
    base = await kubelet_endpoint(api, agent.node_name)
    return await asyncio.to_thread(_stats_summary, base, (str(cp.kubelet_client.cert), str(cp.kubelet_client.key)))
