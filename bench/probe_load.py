"""Probe load: the real probe service probing N always-healthy targets twice a second each
(httpGet readiness and tcpSocket liveness, after an httpGet startup probe), for a fixed time.

The targets are host-network "pods" on distinct loopback addresses served by one asyncio server
process, so the figures are the probe service's own: its CPU, probe latency, failures (all are
spurious: the targets never fail) and the TIME-WAIT sockets left behind. Baseline: the same
request rate from a plain prober that closes sockets normally (what leaves TIME-WAIT behind).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.stats import cpu_seconds, time_wait_to_ports
from shared.store import DesiredPod, PodRuntime, Store

REPO = Path(__file__).resolve().parents[1]

SERVER = r"""
import asyncio, sys
async def http(reader, writer):
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
    except Exception:
        pass
    writer.close()
async def tcp(reader, writer):
    # Like most servers: keep an accepted connection until the client closes it.
    try:
        await reader.read()
    except Exception:
        pass
    writer.close()
async def main():
    a = await asyncio.start_server(http, "0.0.0.0", int(sys.argv[1]), backlog=4096)
    b = await asyncio.start_server(tcp, "0.0.0.0", int(sys.argv[2]), backlog=4096)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pod(i: int, http_port: int, tcp_port: int) -> dict:
    probe = {"periodSeconds": 1, "timeoutSeconds": 1}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"load-{i}", "namespace": "bench", "uid": f"bench-{i}"},
            "spec": {"hostNetwork": True, "containers": [{
                "name": "app", "image": "none:1",
                "readinessProbe": {"httpGet": {"path": "/ready", "port": http_port}, **probe},
                "livenessProbe": {"tcpSocket": {"port": tcp_port}, **probe},
                "startupProbe": {"httpGet": {"path": "/started", "port": http_port}, **probe,
                                 "failureThreshold": 30}}]}}


def _seed(store_path: Path, pods: int, http_port: int, tcp_port: int) -> None:
    store = Store(store_path, writer="pod-sync")
    store.create_schema()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    with store.session() as s:
        for i in range(pods):
            ip = f"127.0.{1 + i // 250}.{1 + i % 250}"
            s.add(DesiredPod(uid=f"bench-{i}", namespace="bench", name=f"load-{i}", source="file",
                             manifest=_pod(i, http_port, tcp_port), admitted=True))
            s.add(PodRuntime(uid=f"bench-{i}", sandbox_id=f"sb{i}", sandbox_ready=True, pod_ip=ip,
                             containers=[{"name": "app", "state": "running", "container_id": f"containerd://c{i}",
                                          "started_at": started, "restart_count": 0}]))
    store.close()


def _metric_lines(text: str, name: str) -> list[tuple[dict, float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels_part, value = line[len(name) + 1:].rsplit("} ", 1)
            labels = dict(kv.split("=", 1) for kv in labels_part.split('",') if "=" in kv)
            out.append(({k: v.strip('"') for k, v in labels.items()}, float(value)))
    return out


def _histogram_p99(text: str) -> float:
    buckets: dict[float, float] = {}
    for labels, value in _metric_lines(text, "prober_probe_duration_seconds_bucket"):
        le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
        buckets[le] = buckets.get(le, 0) + value
    total = buckets.get(float("inf"), 0)
    for le in sorted(buckets):
        if buckets[le] >= 0.99 * total:
            return le
    return float("nan")


async def _baseline_time_wait(tcp_port: int, rate: int, seconds: float) -> int:
    """A plain TCP prober: connect, then an ordinary close, which leaves the client side of every
    probe in TIME-WAIT for a minute."""
    async def one():
        _, writer = await asyncio.open_connection("127.0.0.1", tcp_port)
        writer.close()
        await writer.wait_closed()

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick = time.monotonic()
        await asyncio.gather(*(one() for _ in range(rate)), return_exceptions=True)
        await asyncio.sleep(max(0, 1 - (time.monotonic() - tick)))
    return time_wait_to_ports({tcp_port})


def run(pods: int = 300, seconds: float = 120, progress=print) -> dict:
    root = Path(tempfile.mkdtemp(prefix="pykubelet-bench-probe-"))
    http_port, tcp_port, nats_port, admin_port = _free_port(), _free_port(), _free_port(), _free_port()
    procs: list[subprocess.Popen] = []
    try:
        procs.append(subprocess.Popen(["nats-server", "-a", "127.0.0.1", "-p", str(nats_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen([sys.executable, "-c", SERVER, str(http_port), str(tcp_port)]))
        _seed(root / "state.db", pods, http_port, tcp_port)
        log = open(root / "probe.log", "w")
        probe = subprocess.Popen([sys.executable, "-m", "services.probe", "--root-dir", str(root),
                                  "--nats-url", f"nats://127.0.0.1:{nats_port}", "--admin-port", str(admin_port),
                                  "--container-runtime-endpoint", f"unix://{root}/no-runtime.sock"],
                                 stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        procs.append(probe)
        admin = f"http://127.0.0.1:{admin_port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(admin + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        progress(f"probe load: {pods} targets x 2 probes/s = {pods * 2}/s for {seconds:.0f}s ...")
        time.sleep(15)  # let every worker start and the startup probes pass
        cpu0, t0 = cpu_seconds(probe.pid), time.monotonic()
        text0 = httpx.get(admin + "/metrics", timeout=10).text
        time.sleep(seconds)
        cpu1, t1 = cpu_seconds(probe.pid), time.monotonic()
        text1 = httpx.get(admin + "/metrics", timeout=10).text

        def totals(text):
            ok = sum(v for labels, v in _metric_lines(text, "prober_probe_total") if labels["result"] == "successful")
            failed = sum(v for labels, v in _metric_lines(text, "prober_probe_total") if labels["result"] == "failed")
            return ok, failed
        ok0, failed0 = totals(text0)
        ok1, failed1 = totals(text1)
        tw = time_wait_to_ports({http_port, tcp_port})
        progress("probe load: baseline TCP prober (normal socket close) for 20s ...")
        rate = int((ok1 - ok0 + failed1 - failed0) / (t1 - t0) / 2)  # the tcpSocket share
        baseline_tw = asyncio.run(_baseline_time_wait(tcp_port, max(1, rate), 20))
        return {
            "targets": pods, "seconds": round(t1 - t0, 1),
            "probes_per_second": round((ok1 - ok0 + failed1 - failed0) / (t1 - t0), 1),
            "probe_service_cpu_cores": round((cpu1 - cpu0) / (t1 - t0), 3),
            "probe_latency_p99_seconds_upper_bound": _histogram_p99(text1),
            "spurious_failures": int(failed1 - failed0),
            "time_wait_sockets": tw,
            "baseline_plain_prober_time_wait_sockets": baseline_tw,
        }
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
