"""Probe load: 100 host-network pods x 3 containers, each container with an httpGet readiness and
a tcpSocket liveness probe every second: 600 probes/s against always-healthy targets (distinct
loopback addresses served by one asyncio process), on each agent in turn.

Printed per agent: its CPU (cores) while the load runs, the probe rate it achieved (from its
prober_probe_total), spurious failures (every failure is spurious: the targets never fail) and
the client-side TIME-WAIT sockets it leaves behind (kubernetes#89898)."""

from __future__ import annotations

import socket
import subprocess
import sys

PODS, CONTAINERS = 100, 3

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Targets:
    """The always-healthy probe targets: one process, an HTTP and a TCP port."""

    def __init__(self) -> None:
        self.http_port, self.tcp_port = free_port(), free_port()
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, str(self.http_port), str(self.tcp_port)])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def probe_pod(i: int, image: str, node_name: str, targets: Targets) -> dict:
    probe = {"periodSeconds": 1, "timeoutSeconds": 1}
    containers = []
    for c in range(CONTAINERS):
        n = i * CONTAINERS + c
        host = f"127.0.{1 + n // 250}.{1 + n % 250}"
        containers.append({
            "name": f"c{c}", "image": image, "command": ["sleep", "3600"],
            "readinessProbe": {"httpGet": {"host": host, "path": "/ready", "port": targets.http_port}, **probe},
            "livenessProbe": {"tcpSocket": {"host": host, "port": targets.tcp_port}, **probe}})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"probe-{i}", "labels": {"bench": "probes"}},
            "spec": {"nodeName": node_name, "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                     "containers": containers}}
