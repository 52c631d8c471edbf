"""The two node agents the benchmarks compare, behind one small interface: start and stop them,
say which processes are theirs (for CPU and memory), where their metrics are, and which of their
static pods are Running (the standalone workloads)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from sqlalchemy import select

from bench.node_api import CONTAINER_LOG_MAX_SIZE
from bench.real_kubelet import NAME as KUBELET_NODE
from bench.real_kubelet import RealKubelet
from shared.store import PodStatusRecord, Store
from tests.cluster.harness import ControlPlane
from tests.integration.conftest import NODE_NAME, SERVICES, launch_node, stop_node

BUSYBOX = "busybox"


class Pykubelet:
    name = "pykubelet"
    node_name = NODE_NAME
    sandbox_labels = {"pykubelet.io/managed": "true"}

    def __init__(self, root: Path, cp: ControlPlane | None, extra_config: str = "", exec_services: bool = False) -> None:
        self.root = root
        self.cp = cp
        self.extra_config = extra_config
        # The systemd units' layout: every service an interpreter of its own, no shared pages.
        self.exec_services = exec_services
        self.label = "pykubelet-exec" if exec_services else "pykubelet"
        self.node = None
        self._store: Store | None = None

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        argv = ["--kubeconfig", str(self.cp.node_kubeconfig)] if self.cp else []
        # The tests resync every 30 s to see changes soon; the kubelet's default is 1m.
        argv += ["--sync-frequency", "1m"]
        if self.exec_services:
            argv.append("--exec-services")
        # launch_node writes the tests' config (logs rotated at 4Ki); these later keys override it
        # (PyYAML keeps the last) so both agents rotate logs and measure volumes alike
        # (bench/real_kubelet.py). In cluster mode the kubelet API trusts the cluster CA for client
        # certificates, as the kubelet's does; webhook authentication and authorization are
        # pykubelet's defaults.
        extra = f"containerLogMaxSize: {CONTAINER_LOG_MAX_SIZE}\ncontainerLogMaxFiles: 5\n"
        # The tests measure volumes every 2 s to see usage soon; the kubelet's default is 1m.
        extra += "volumeStatsAggPeriod: 1m\n"
        # The same for log sizes: the tests look every 3 s, the kubelet by default every 10 s.
        extra += "containerLogMonitorInterval: 10s\n"
        if self.cp:
            extra += f"authentication:\n  x509:\n    clientCAFile: {self.cp.ca}\n"
        extra += self.extra_config
        # watch_loops=False: the figures are the node's own, without the tests' loop watchdog.
        self.node = await asyncio.to_thread(lambda: launch_node(self.root, argv, extra, watch_loops=False))

    async def stop(self) -> None:
        if self._store is not None:
            self._store.close()
        if self.node is not None:
            await asyncio.to_thread(stop_node, self.node)
            self.node = None

    @property
    def endpoint(self) -> str:
        return f"unix://{self.node.root}/containerd/containerd.sock"

    @property
    def static_dir(self) -> Path:
        return self.node.manifests

    @property
    def registry(self) -> str:
        return self.node.registry

    def image(self, name: str) -> str:
        return self.node.image(name)

    def pids(self) -> dict[str, int]:
        """Everything pykubelet runs (the registry serves both agents' images: not counted)."""
        return {name: self.node.service_pid(name) for name in [*SERVICES, "nats", "supervisor"]}

    def metrics_urls(self) -> dict[str, str]:
        return {name: self.node.admin(name) + "/metrics" for name in SERVICES}

    def get_text(self, url: str) -> str:
        # The services' admin apps: plain HTTP on loopback, with the node's admin token.
        return httpx.get(url, timeout=10, headers={"Authorization": f"Bearer {self.node.admin_token()}"}).text

    def running_static(self) -> set[str]:
        """Static pods `pykubelet status` shows Running (it reads the same store rows)."""
        if self._store is None:
            self._store = Store(self.node.root / "state.db", writer=None)
        with self._store.session() as s:
            rows = s.execute(select(PodStatusRecord.name, PodStatusRecord.phase)).all()
        return {name.removesuffix(f"-{NODE_NAME}") for name, phase in rows if phase == "Running"}

    def static_pods_left(self) -> int:
        with self._store.session() as s:
            return len(s.execute(select(PodStatusRecord.uid)).all())


class Kubelet:
    name = label = "kubelet"
    node_name = KUBELET_NODE
    sandbox_labels: dict[str, str] = {}

    def __init__(self, root: Path, cp: ControlPlane | None, extra_config: str = "") -> None:
        self.root = root
        self.manifests = root / "manifests"
        self.real = RealKubelet(root, cp, self.manifests if cp is None else None, extra_config)
        # In cluster mode its API wants a client certificate (the API server's); standalone it is
        # anonymous. Its serving certificate is self-signed.
        cert = (str(cp.kubelet_client.cert), str(cp.kubelet_client.key)) if cp else None
        self._http = httpx.Client(verify=False, timeout=5, cert=cert)

    async def start(self) -> None:
        self.manifests.mkdir(parents=True, exist_ok=True)
        await self.real.start()
        deadline = asyncio.get_running_loop().time() + 120
        while True:  # its API answers once it is up
            try:
                if self._http.get(self.real.api + "/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the kubelet did not come up; see {self.root / 'kubelet.log'}")
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        self._http.close()
        await self.real.stop()

    @property
    def endpoint(self) -> str:
        return self.real.endpoint

    @property
    def static_dir(self) -> Path:
        return self.manifests

    @property
    def registry(self) -> str:
        return self.real.infra.registry

    def image(self, name: str) -> str:
        return self.real.image(name)

    def pids(self) -> dict[str, int]:
        return {"kubelet": self.real.pid}

    def metrics_urls(self) -> dict[str, str]:
        # The kubelet keeps its prober counters on a separate endpoint.
        return {"kubelet": self.real.api + "/metrics", "kubelet-probes": self.real.api + "/metrics/probes"}

    def get_text(self, url: str) -> str:
        return self._http.get(url, timeout=10).text

    def _pods(self) -> list[dict]:
        return self._http.get(self.real.api + "/pods").json().get("items") or []

    def running_static(self) -> set[str]:
        """Static pods the kubelet's own /pods reports Running."""
        return {p["metadata"]["name"].removesuffix(f"-{KUBELET_NODE}") for p in self._pods()
                if p.get("status", {}).get("phase") == "Running"}

    def static_pods_left(self) -> int:
        return len(self._pods())
