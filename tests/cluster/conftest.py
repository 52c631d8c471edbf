"""Cluster tests: a real etcd + kube-apiserver, and a pykubelet node joined to it with a
system:node client certificate, as kubeadm would set it up."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cluster.csr_signer import KubeletServingSigner
from tests.cluster.harness import ControlPlane, HarnessError
from tests.integration.conftest import (
    NODE_NAME,
    launch_node,
    require_node_prerequisites,
    stop_node,
    wait_for,
    wait_for_object,
)

CLUSTER_LOG_MAX_SIZE = 64 * 1024

class Cluster:
    def __init__(self, cp: ControlPlane, node, signer: KubeletServingSigner | None = None) -> None:
        self.cp = cp
        self.node = node
        self.signer = signer

    def kubectl(self, *args, **kw):
        return self.cp.kubectl(*args, **kw)

    def get(self, *args) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def node_obj(self) -> dict:
        return self.get("node", NODE_NAME)

    def ready(self) -> str:
        conds = self.node_obj()["status"].get("conditions", [])
        return next((c["status"] for c in conds if c["type"] == "Ready"), "Unknown")

    def create_pod(self, name: str, spec: dict, namespace: str = "default") -> dict:
        doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
               "spec": {"nodeName": NODE_NAME, "terminationGracePeriodSeconds": 2, **spec}}
        return json.loads(self.kubectl("create", "-o", "json", "-f", "-", input_text=json.dumps(doc)).stdout)

    def pod(self, name: str, namespace: str = "default") -> dict | None:
        res = self.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
        return json.loads(res.stdout) if res.returncode == 0 else None

    def wait_pod(self, name: str, predicate, timeout: float = 60, what: str = "") -> dict:
        return wait_for_object(lambda: self.pod(name), predicate, timeout, what or f"pod {name}")


@contextmanager
def started_control_plane(workdir: Path, node_name: str, **options) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for a package's node, stopped on leaving. One that cannot start fails
    the tests with the reason (a missing build, a port in use), not an error deep in a fixture."""
    cp = ControlPlane(workdir, node_name, **options)
    try:
        try:
            cp.start()
        except HarnessError as exc:
            pytest.fail(f"cannot start the test control plane: {exc}")
        yield cp
    finally:
        cp.stop()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


# What the Node is created with; PreferNoSchedule, so the scheduler still places pods here.
PROVIDER_ID = "pykubelet://testnode"
TAINT = {"key": "pykubelet.io/test", "value": "cluster", "effect": "PreferNoSchedule"}
# Shorter than the kubelet's 40 s and 5 m, so tests see the lease and the status follow them.
LEASE_SECONDS, STATUS_REPORT_EVERY = 20, 20
# How often the node looks at its status and sends what changed (the kubelet's 10 s).
STATUS_UPDATE_EVERY = 2
REGISTRATION = (f"nodeLeaseDurationSeconds: {LEASE_SECONDS}\nnodeStatusReportFrequency: {STATUS_REPORT_EVERY}s\n"
                f"nodeStatusUpdateFrequency: {STATUS_UPDATE_EVERY}s\n")
# The rest as the kubelet's flags, as a seed's command line gives them.
NODE_LABELS = {"pykubelet.io/pool": "cluster", "node.kubernetes.io/exclude-from-external-load-balancers": ""}
SYSTEM_RESERVED_CPU_M, KUBE_RESERVED_MEMORY_MI, MAX_PODS = 100, 64, 60
PODS_PER_CORE = 25  # below MAX_PODS on a host of 2 CPUs: the node's capacity is 50 pods there
SEED_FLAGS = [f"--provider-id={PROVIDER_ID}", f"--register-with-taints={TAINT['key']}={TAINT['value']}:{TAINT['effect']}",
              "--node-labels=" + ",".join(f"{k}={v}" for k, v in NODE_LABELS.items()),
              f"--system-reserved=cpu={SYSTEM_RESERVED_CPU_M}m", f"--kube-reserved=memory={KUBE_RESERVED_MEMORY_MI}Mi",
              f"--max-pods={MAX_PODS}", f"--pods-per-core={PODS_PER_CORE}"]
# The cgroups (made here, empty) on which the node enforces those reservations, as a seed's
# --enforce-node-allocatable gives it.
SYSTEM_RESERVED_CGROUP, KUBE_RESERVED_CGROUP = "/pykubelet-test-system.slice", "/pykubelet-test-kube.slice"
SEED_FLAGS += ["--enforce-node-allocatable=pods,system-reserved,kube-reserved",
               f"--system-reserved-cgroup={SYSTEM_RESERVED_CGROUP}", f"--kube-reserved-cgroup={KUBE_RESERVED_CGROUP}"]
CGROUP_V1_ROOT = Path("/sys/fs/cgroup")
# The kubelet API's TLS 1.2 suites (TLS 1.3, which the API server speaks, has its own), its one
# key exchange curve (Go's CurveP384, which the API server offers too), and how long an exec,
# attach or port-forward stream may carry nothing before the node closes it (the kubelet's
# default is 4 h), no profiling endpoint, and node log queries on /logs/.
TLS12_SUITES = ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]
TLS_CURVE = 24
STREAM_IDLE_SECONDS = 15
KUBELET_API = (f"tlsCipherSuites: [{', '.join(TLS12_SUITES)}]\n"
               f"tlsCurvePreferences: [{TLS_CURVE}]\n"
               f"streamingConnectionIdleTimeout: {STREAM_IDLE_SECONDS}s\n"
               "enableProfilingHandler: false\n"
               "enableSystemLogQuery: true\n")
# A CFS period of half the kubelet's default: CPU limits are quotas of 50 ms
# (tests/cluster/test_pod_resize.py reads them).
CFS_PERIOD_US = 50_000
CPU = f"cpuCFSQuotaPeriod: {CFS_PERIOD_US // 1000}ms\n"


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    require_node_prerequisites()
    # The API server checks the node's serving certificate, which the node gets through a CSR
    # (serverTLSBootstrap) that the signer below approves and issues with the cluster CA.
    with started_control_plane(tmp_path_factory.mktemp("control-plane"), NODE_NAME, verify_kubelets=True) as cp:
        yield from _cluster_on(cp, tmp_path_factory)


def _cluster_on(cp: ControlPlane, tmp_path_factory) -> Iterator[Cluster]:
    """The node, joined to `cp` as kubeadm would join it, with its serving-certificate signer."""
    node = None
    signer = KubeletServingSigner(cp)
    signer.start()
    reserved = [CGROUP_V1_ROOT / controller / cgroup.lstrip("/") for controller in ("cpu", "memory", "pids")
                for cgroup in (SYSTEM_RESERVED_CGROUP, KUBE_RESERVED_CGROUP)]
    try:
        for d in reserved:
            d.mkdir(exist_ok=True)
        # Logs up to 64 KiB before a rotation: kubectl logs reads the current file only, so
        # a test's expected output must fit in one (the rotation test writes fast enough).
        node = launch_node(tmp_path_factory.mktemp("cluster-node"), ["--kubeconfig", str(cp.node_kubeconfig), *SEED_FLAGS],
                           extra_config=f"serverTLSBootstrap: true\nauthentication:\n  x509:\n"
                                        f"    clientCAFile: {cp.ca}\n{REGISTRATION}{KUBELET_API}{CPU}",
                           log_max_size=CLUSTER_LOG_MAX_SIZE)
        c = Cluster(cp, node, signer)
        wait_for(lambda: c.ready() == "True", 60, "the node to register and turn Ready")
        # The kubelet API listens once its serving certificate is issued (the CSR above), which
        # can come after Ready; exec, logs and port-forward need it.
        wait_for(lambda: _accepts(node.kubelet_port), 60, "the kubelet API to listen")
        yield c
    finally:
        if node is not None:
            stop_node(node)
        for d in reserved:
            if d.is_dir():
                d.rmdir()  # an empty cgroup: nothing ran in it
        signer.stop()
