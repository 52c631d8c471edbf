"""A real local node for integration tests: NATS, registry, containerd and all seven services,
started with `pykubelet up` exactly as a user would, on free loopback ports and a temp root dir.

A missing component is a test failure that says what to install, never a skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from shared.process.admin import SERVICES
from shared.process.admin_token import read_token, token_path
from shared.runtime.cri import CRIClient, CRIError
from tests.integration.event_loops import assert_loops_never_blocked, watched_env
from tests.integration.manifest_server import ManifestServer

REPO = Path(__file__).resolve().parents[2]
PYKUBELET = [sys.executable, "-m", "services.cli.main"]
NODE_NAME = "testnode"
POD_CIDR = "10.88.0.0/24"
START_TIMEOUT = 180
CRASH_BACKOFF_INITIAL, CRASH_BACKOFF_MAX = 1, 4
LOG_MAX_SIZE, LOG_MAX_FILES, LOG_MONITOR_EVERY = 4096, 3, 3
# Every pod's processes at most, as production nodes set it (a fork bomb stays in its pod).
POD_PIDS_LIMIT = 1024
# The search domain of the node's resolvConf file: the host's resolver plus this, so a pod shows
# whether it got the file the config names or the runtime's copy of /etc/resolv.conf.
RESOLV_SEARCH = "pykubelet-node.test"
KUBELET_CERT_DIR = "kubelet-pki"  # --cert-dir of the loopback_api node, in its root dir
MANIFEST_URL_HEADER, HTTP_CHECK_EVERY = "X-Pykubelet-Node:integration", 2  # its --manifest-url's
KUBELET_CONFIG = f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
crashLoopBackOff:
  initialContainerRestartPeriod: {CRASH_BACKOFF_INITIAL}s
  maxContainerRestartPeriod: {CRASH_BACKOFF_MAX}s
containerLogMaxFiles: {LOG_MAX_FILES}
containerLogMonitorInterval: {LOG_MONITOR_EVERY}s
volumeStatsAggPeriod: 2s
podPidsLimit: {POD_PIDS_LIMIT}
"""


def require_node_prerequisites() -> None:
    if os.geteuid() != 0:
        pytest.fail("integration tests run real containers and need root (run `make test` as root)")
    missing = [t for t in ("containerd", "runc", "nats-server", "docker-registry") if not shutil.which(t)]
    if not Path("/usr/lib/cni/bridge").exists():
        missing.append("containernetworking-plugins")
    if not Path("/bin/busybox").exists():
        missing.append("busybox-static")
    if missing:
        pytest.fail(f"missing node components: {', '.join(missing)}; `make deps` installs them")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_range(n: int) -> int:
    """A base port with n free consecutive ports after it, below the kernel's ephemeral range:
    the services bind them only as they start, and a port in that range can be taken meanwhile by
    any outgoing connection's local end (a probe service once found its admin port so taken)."""
    low = _ephemeral_low()
    for _ in range(100):
        base = random.randrange(10_000, max(10_001, low - n))
        if base + n > 65000:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free range of loopback ports")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the condition may not be checkable yet
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}"
                         + (f" (last error: {last_exc})" if last_exc else ""))


def wait_for_object(get: Callable[[], dict | None], predicate: Callable[[dict], bool], timeout: float,
                    what: str) -> dict:
    """Wait until get() returns an object matching predicate; on timeout, show the object."""
    def check():
        obj = get()
        return obj if obj is not None and predicate(obj) else None
    try:
        return wait_for(check, timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; now: {json.dumps(get(), indent=1)[:3000]}") from None




@dataclass
class Node:
    root: Path
    manifests: Path
    registry: str
    admin_base: int
    proc: subprocess.Popen
    log: Path
    kubelet_port: int = 0  # the kubelet API (node-api), HTTPS
    read_only_port: int = 0  # its read-only HTTP port (readOnlyPort), 0 when off
    healthz_port: int = 0  # the node's healthz (healthzPort), plain HTTP on 127.0.0.1
    written: list[Path] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # how `pykubelet up` was run
    node_name: str = NODE_NAME
    env: dict[str, str] | None = None  # `pykubelet up`'s environment (None: this process's)
    manifest_url: ManifestServer | None = None  # what the node's staticPodURL answers, when it has one

    # the user's view

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        res = subprocess.run([*PYKUBELET, *args, "--root-dir", str(self.root)], capture_output=True,
                             text=True, timeout=60, cwd=REPO)
        if check and res.returncode != 0:
            raise AssertionError(f"pykubelet {' '.join(args)} failed ({res.returncode}): {res.stderr}")
        return res

    def status_output(self, *args: str) -> str:
        """`pykubelet status` output; 3 (node not running) and 4 (not all current) print state too."""
        res = self.cli("status", *args, check=False)
        assert res.returncode in (0, 3, 4), f"pykubelet status failed ({res.returncode}): {res.stderr}"
        return res.stdout

    def status(self) -> dict[str, Any]:
        return json.loads(self.status_output("-o", "json"))

    def pod(self, name: str) -> dict[str, Any] | None:
        full = f"{name}-{self.node_name}"
        return next((p for p in self.status()["pods"] if p["name"] == full), None)

    def wait_pod(self, name: str, predicate: Callable[[dict], bool], timeout: float = 60,
                 what: str = "") -> dict[str, Any]:
        return wait_for_object(lambda: self.pod(name), predicate, timeout, what or f"pod {name}")

    def wait_manifest_errors(self, count: int, timeout: float = 30) -> tuple[dict[str, Any], dict[str, str]]:
        """Once `count` manifests are reported unusable: the status, and file name -> error."""
        status = wait_for(lambda: (s := self.status()) and len(s["manifestErrors"]) == count and s, timeout,
                          f"{count} unusable manifests reported")
        return status, {e["file"].rsplit("/", 1)[1]: e["error"] for e in status["manifestErrors"]}

    def wait_running(self, name: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait_pod(name, lambda p: p["phase"] == "Running" and p["podIP"]
                             and all(c["state"] == "running" for c in p["containers"] if not c["init"]),
                             timeout,
                             f"pod {name} Running with all containers running")

    def image(self, name: str) -> str:
        tags = {"web": "web:1.0", "busybox": "busybox:1.36"}
        return f"{self.registry}/pykubelet/{tags[name]}"

    def write(self, filename: str, text: str) -> Path:
        path = self.manifests / filename
        tmp = self.manifests / f".{filename}.tmp"
        tmp.write_text(text)
        tmp.rename(path)  # atomic: the watcher never sees half a file
        if path not in self.written:
            self.written.append(path)
        return path

    def remove(self, filename: str) -> None:
        (self.manifests / filename).unlink(missing_ok=True)

    def admin(self, service: str) -> str:
        """The base URL of a service's loopback admin app. It answers nothing without the node's
        admin token: ask it with admin_get."""
        return f"http://127.0.0.1:{self.admin_base + SERVICES.index(service)}"

    def admin_token(self) -> str:
        return read_token(token_path(self.root))

    def admin_get(self, service: str, path: str, timeout: float = 5) -> httpx.Response:
        """GET path (/readyz, /metrics, /pods, ...) on a service's admin app as root asks it: with
        the node's admin token. Every test that looks at an admin URL goes through here."""
        return httpx.get(self.admin(service) + path, timeout=timeout,
                         headers={"Authorization": f"Bearer {self.admin_token()}"})

    def service_pid(self, service: str) -> int:
        return int((self.root / "run" / f"{service}.pid").read_text())

    # the runtime's view

    def runtime(self, fn: Callable[[CRIClient], Any]) -> Any:
        async def go():
            cri = CRIClient(f"unix://{self.root}/containerd/containerd.sock", timeout=30)
            try:
                return await fn(cri)
            finally:
                await cri.close()
        return asyncio.run(go())

    def containers_of(self, uid: str) -> list:
        return self.runtime(lambda cri: cri.list_containers({"io.kubernetes.pod.uid": uid}))

    def container_statuses(self, uid: str) -> list:
        """Full CRI statuses of a pod's containers, oldest first."""
        async def go(cri):
            cs = await cri.list_containers({"io.kubernetes.pod.uid": uid})
            statuses = []
            for c in cs:
                try:
                    statuses.append(await cri.container_status(c.id))
                except CRIError as exc:  # removed since the list (an old dead instance collected)
                    if not exc.not_found:
                        raise
            return sorted(statuses, key=lambda st: st.created_at)
        return self.runtime(go)

    def runtime_pid(self, kind: str, object_id: str) -> int:
        """The host PID of a container ("container") or a sandbox's pause process ("sandbox"),
        from the runtime's verbose status."""
        import grpc
        from cri_api.v1 import api_pb2 as cri
        from cri_api.v1 import api_pb2_grpc as cri_grpc

        async def go():
            async with grpc.aio.insecure_channel(f"unix://{self.root}/containerd/containerd.sock") as ch:
                stub = cri_grpc.RuntimeServiceStub(ch)
                if kind == "container":
                    resp = await stub.ContainerStatus(cri.ContainerStatusRequest(container_id=object_id, verbose=True), timeout=10)
                else:
                    resp = await stub.PodSandboxStatus(cri.PodSandboxStatusRequest(pod_sandbox_id=object_id, verbose=True), timeout=10)
                return json.loads(resp.info["info"])["pid"]
        return asyncio.run(go())

    def write_pod(self, name: str, spec: dict, **metadata) -> Path:
        """Write a static pod manifest from a spec dict (containers given in full)."""
        import yaml

        doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **metadata},
               "spec": {"terminationGracePeriodSeconds": 2, **spec}}
        return self.write(f"{name}.yaml", yaml.safe_dump(doc))

    def exec(self, uid: str, container: str, cmd: list[str], timeout: float = 10) -> tuple[int, str]:
        """Run a command in the pod's running container; (exit code, stdout + stderr)."""
        async def go(cri):
            running = [c for c in await cri.list_containers({"io.kubernetes.pod.uid": uid})
                       if c.metadata.name == container and c.state == 1]
            assert running, f"container {container} of pod {uid} is not running"
            resp = await cri.exec_sync(running[0].id, cmd, timeout)
            return resp.exit_code, (resp.stdout + resp.stderr).decode(errors="replace")
        return self.runtime(go)

    def sandboxes_of(self, uid: str) -> list:
        return self.runtime(lambda cri: cri.list_pod_sandbox({"io.kubernetes.pod.uid": uid}))


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within the timeout."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def launch_node(root: Path, extra_argv: list[str] | None = None, extra_config: str = "", *,
                node_name: str = NODE_NAME, pod_cidr: str = POD_CIDR, wrap: tuple[str, ...] = (),
                registry_port: int | None = None, log_max_size: int = LOG_MAX_SIZE,
                watch_loops: bool = True, read_only_port: int = 0) -> Node:
    """Start a node with `pykubelet up` in root, wait until it is ready, return it.
    extra_config: more KubeletConfiguration fields (YAML lines); wrap: what runs `pykubelet up`
    (e.g. nsenter into a network namespace); log_max_size: containerLogMaxSize in bytes;
    watch_loops: the services record blocking callbacks for assert_loops_never_blocked;
    read_only_port: the kubelet API's readOnlyPort (0: off)."""
    require_node_prerequisites()
    manifests = root / "manifests"
    manifests.mkdir()
    registry_port = registry_port or free_port()
    nats_port, admin_base = free_port(), free_port_range(len(SERVICES))
    kubelet_port, healthz_port = free_port(), free_port()
    log = root / "up.log"
    config = root / "kubelet-config.yaml"
    # Short back-off and small logs so restart and rotation behaviour shows within a test; the
    # kubelet API on a free port so a node on this machine keeps its 10250.
    resolv = root.with_name(f"{root.name}-resolv.conf")  # beside the root dir: not one of the node's files
    resolv.write_text("".join(line + "\n" for line in Path("/etc/resolv.conf").read_text().splitlines()
                              if not line.startswith(("search", "domain"))) + f"search {RESOLV_SEARCH}\n")
    config.write_text(KUBELET_CONFIG + f"containerLogMaxSize: {log_max_size // 1024}Ki\nport: {kubelet_port}\n"
                      f"healthzPort: {healthz_port}\nresolvConf: {resolv}\n" + extra_config)
    argv = [*wrap, *PYKUBELET, "up", "--config", str(config), "--root-dir", str(root),
            "--pod-manifest-path", str(manifests),
            "--pod-logs-dir", str(root / "pod-logs"), "--nats-port", str(nats_port),
            "--registry-port", str(registry_port), "--admin-port-base", str(admin_base),
            "--push-demo-images", "--wait-pods", "1", "--pod-cidr", pod_cidr,
            "--hostname-override", node_name,
            # Long rescan period: changes must arrive through the directory watch.
            "--file-check-frequency", "5m", "--sync-frequency", "30s",
            *([f"--read-only-port={read_only_port}"] if read_only_port else []), *(extra_argv or [])]
    env = watched_env(root) if watch_loops else None
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    n = Node(root, manifests, f"127.0.0.1:{registry_port}", admin_base, proc, log, kubelet_port=kubelet_port,
             read_only_port=read_only_port, argv=argv, node_name=node_name, env=env, healthz_port=healthz_port)
    _wait_up(n)
    return n


def relaunch_node(n: Node) -> None:
    """`pykubelet up` again, as before, on the same root dir and ports (the log is appended)."""
    (n.root / "run" / "ready").unlink(missing_ok=True)  # a killed supervisor leaves its own
    with open(n.log, "a") as out:
        n.proc = subprocess.Popen(n.argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=n.env)
    _wait_up(n)


def _wait_up(n: Node) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not (n.root / "run" / "ready").exists():
        if n.proc.poll() is not None:
            stop_node(n)
            pytest.fail(f"pykubelet up exited with {n.proc.returncode} while starting:\n{_tail(n.log)}")
        if time.monotonic() > deadline:
            stop_node(n)
            pytest.fail(f"pykubelet up not ready after {START_TIMEOUT}s:\n{_tail(n.log)}")
        time.sleep(0.3)


def package_node(dir_name: str, loopback_api: bool = False):
    """A `node` fixture for a test package: a node of its own, gone before another test package
    starts its own. loopback_api: the kubelet API on 127.0.0.1 only (--address), with a read-only
    port (--read-only-port) and its serving certificate in <root>/kubelet-pki (--cert-dir), and
    static pods from a URL too (--manifest-url, served by tests/integration/manifest_server.py)."""
    @pytest.fixture(scope="package")
    def node(tmp_path_factory) -> Iterator[Node]:
        root = tmp_path_factory.mktemp(dir_name)
        flags, served = [], None
        if loopback_api:
            # The kubelet's flags, as a seed's command line gives them.
            served = ManifestServer(root.with_name(f"{root.name}-manifest-url.yaml")).start()
            flags = ["--address=127.0.0.1", f"--cert-dir={root / KUBELET_CERT_DIR}", f"--manifest-url={served.url}",
                     f"--manifest-url-header={MANIFEST_URL_HEADER}", f"--http-check-frequency={HTTP_CHECK_EVERY}s"]
        try:
            n = launch_node(root, flags, read_only_port=free_port() if loopback_api else 0)
            n.manifest_url = served
            try:
                yield n
            finally:
                stop_node(n)
        finally:
            if served is not None:
                served.stop()
        assert_loops_never_blocked(n.root)
    return node


node = package_node("node", loopback_api=True)


def stop_node(n: Node) -> None:
    if n.proc.poll() is None:
        n.proc.send_signal(signal.SIGTERM)
        try:
            n.proc.wait(timeout=150)
        except subprocess.TimeoutExpired:
            n.proc.kill()
            n.proc.wait()
    # Anything of this node's still alive is a leak: end it (by the pids it recorded).
    for pid_file in (n.root / "run").glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ValueError, OSError):
            pass


@pytest.fixture
def pods(node: Node):
    """Gives a test the node and removes the manifests it wrote, waiting for their pods to go."""
    node.written = []
    yield node
    for path in node.written:
        path.unlink(missing_ok=True)
    if node.proc.poll() is None:
        wait_for(lambda: not node.status()["pods"], 90, "test pods to be removed")
