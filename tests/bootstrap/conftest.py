"""A node joined with the real `kubeadm join` 1.37 (tests/kube_build.py builds kubeadm beside the
control plane), with pykubelet as its kubelet:

- the control plane is prepared by kubeadm itself, `kubeadm init phase upload-config kubeadm`,
  `upload-config kubelet` and `bootstrap-token` against the tests' API server (the ConfigMaps,
  the token and the RBAC a join needs), and kube-controller-manager approves and signs kubelet
  client CSRs with the cluster CA;
- the node is a private host (tests/bootstrap/private_host.py: /etc, /var/lib and /usr/local
  overlaid, so the machine's /etc/kubernetes and /var/lib/kubelet are untouched) with a containerd
  of its own (tests/bootstrap/host_runtime.py);
- pykubelet is installed there as the kubelet, `pykubelet install --as-kubelet --kubelet-path
  /usr/local/bin/kubelet`: the binary, kubelet.service and kubeadm's drop-in;
- `kubeadm join --discovery-file ... --tls-bootstrap-token ...` runs there, and once it has written
  /var/lib/kubelet/kubeadm-flags.env the kubelet is started from the installed unit and drop-in as
  systemd would start it (tests/bootstrap/unit_command.py): `/usr/local/bin/kubelet
  $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS`, the
  last from /etc/default/kubelet. Join returns once the kubelet's healthz is ok and the TLS
  bootstrap has written /etc/kubernetes/kubelet.conf."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from shared.process.admin import SERVICES
from tests.bootstrap.host_runtime import HostRuntime, HostRuntimeError
from tests.bootstrap.private_host import PrivateHost, PrivateHostError
from tests.bootstrap.unit_command import shell_command
from tests.cluster.harness import KUBE_BIN, ControlPlane, HarnessError, ensure_kube_binaries
from tests.integration.conftest import (
    NODE_NAME,
    PYKUBELET,
    REPO,
    Node,
    _tail,
    _wait_up,
    free_port,
    free_port_range,
    require_node_prerequisites,
    stop_node,
    stop_process,
    wait_for,
)
from tests.integration.event_loops import watched_env
from tests.kubeadm_control_plane import APISERVER_ARGS, join_argv, kubeadm_config, prepare_control_plane, signing_args

# The signer's certificate lifetime. Its certificates start 5 minutes back (the signer's
# backdate), so one lasts 7.5 minutes and is renewed 15-105 s after it is issued (70-90%).
SIGNING_DURATION = 150
KUBELET_ROOT = "/var/lib/kubelet"
# Where a kubelet installed without a package manager goes (the Kubernetes docs' choice).
KUBELET_PATH = "/usr/local/bin/kubelet"
UNIT_DIR = "/etc/systemd/system"
JOIN_TIMEOUT = 360  # kubeadm's own waits: 4 min for the kubelet's healthz, 5 for the TLS bootstrap


@dataclass
class Joined:
    cp: ControlPlane
    host: PrivateHost
    runtime: HostRuntime
    node: Node
    join_output: str

    kubeconfig = "/etc/kubernetes/kubelet.conf"
    cert_dir = f"{KUBELET_ROOT}/pki"

    def file(self, inside: str) -> Path:
        """A file the node wrote, by its path on the node."""
        return self.host.path(inside)

    def pykubelet(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """pykubelet's command line on the node."""
        return subprocess.run([*self.host.enter(), *PYKUBELET, *args], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)

    def kubeadm(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """kubeadm on the node."""
        return subprocess.run([*self.host.enter(), str(KUBE_BIN / "kubeadm"), *args], capture_output=True,
                              text=True, timeout=timeout)

    def get(self, *args: str) -> dict:
        return json.loads(self.cp.kubectl("get", *args, "-o", "json").stdout)

    def ready(self) -> str:
        res = self.cp.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        if res.returncode != 0:
            return "absent"
        conds = json.loads(res.stdout)["status"].get("conditions", [])
        return next((c["status"] for c in conds if c["type"] == "Ready"), "Unknown")


@pytest.fixture(scope="package")
def joined(tmp_path_factory) -> Iterator[Joined]:
    require_node_prerequisites()
    work = tmp_path_factory.mktemp("kubeadm-join")
    cp = ControlPlane(work / "control-plane", NODE_NAME, apiserver_extra=APISERVER_ARGS)
    host, runtime, node, join = PrivateHost(work / "host"), None, None, None
    try:
        try:
            ensure_kube_binaries("kubeadm")
            cp.start()
            # csrapproving and csrsigning are among the controllers kube-controller-manager runs.
            cp.start_controllers(signing_args(cp, SIGNING_DURATION))
            (work / "host").mkdir()
            host.start()
            runtime = HostRuntime(work / "runtime", Path(KUBELET_ROOT), wrap=tuple(host.enter()))
            runtime.start()
            kubelet_port, healthz_port = free_port(), free_port()
            prepare_control_plane(cp, work, kubeadm_config(cp, runtime.endpoint, kubelet_port, healthz_port))
        except (HarnessError, PrivateHostError, HostRuntimeError) as exc:
            pytest.fail(f"cannot set up the cluster and host for kubeadm join: {exc}")
        installed = subprocess.run([*host.enter(), *PYKUBELET, "install", "--as-kubelet", "--kubelet-path", KUBELET_PATH],
                                   capture_output=True, text=True, timeout=60, cwd=REPO)
        if installed.returncode != 0:
            pytest.fail(f"pykubelet install --as-kubelet failed: {installed.stdout}{installed.stderr}")
        # pykubelet's own flags, where a user adds flags: the bus and admin ports free here, the
        # pods' logs beside the test's (/var/log is not the private host's).
        nats_port, admin_base = free_port(), free_port_range(len(SERVICES))
        pod_logs = work / "pod-logs"
        default = host.path("/etc/default/kubelet")
        default.parent.mkdir(parents=True, exist_ok=True)
        default.write_text(f'KUBELET_EXTRA_ARGS="--nats-url=nats://127.0.0.1:{nats_port} '
                           f'--admin-port-base={admin_base} --pod-logs-dir={pod_logs}"\n')
        join_log = work / "kubeadm-join.log"
        with open(join_log, "w") as out:
            join = subprocess.Popen([*host.enter(), *join_argv(cp, work, runtime.endpoint, NODE_NAME)],
                                    stdout=out, stderr=subprocess.STDOUT)
        # kubeadm finds no init system to restart kubelet.service with: the test is that init system.
        flags = host.path(f"{KUBELET_ROOT}/kubeadm-flags.env")
        wait_for(lambda: flags.exists() or join.poll() is not None, 120, "kubeadm join to write kubeadm-flags.env")
        if not flags.exists():
            pytest.fail(f"kubeadm join exited with {join.returncode} before starting the kubelet:\n{_tail(join_log)}")
        node = launch_drop_in(host, runtime, work, kubelet_port, healthz_port, admin_base)
        try:
            code = join.wait(timeout=JOIN_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        output = installed.stdout + join_log.read_text()
        if code != 0:
            pytest.fail(f"kubeadm join {'timed out' if code is None else f'exited with {code}'}:\n{output[-3000:]}\n"
                        f"pykubelet kubelet:\n{_tail(node.log)}")
        j = Joined(cp, host, runtime, node, output)
        wait_for(lambda: j.ready() == "True", 90, "the node to register and turn Ready")
        yield j
    finally:
        if join is not None:
            stop_process(join, timeout=5)
        if node is not None:
            stop_node(node)
        if runtime is not None:
            runtime.stop(str(work / "pod-logs"))
        host.stop()
        cp.stop()


def launch_drop_in(host: PrivateHost, runtime: HostRuntime, work: Path, kubelet_port: int, healthz_port: int,
                   admin_base: int) -> Node:
    """The kubelet on the private host, as systemd runs kubelet.service with kubeadm's drop-in."""
    units = host.path(UNIT_DIR)
    command = shell_command((units / "kubelet.service").read_text(),
                            (units / "kubelet.service.d" / "10-kubeadm.conf").read_text())
    argv = [*host.enter(), "sh", "-c", command]
    root, log, env = host.path(KUBELET_ROOT), work / "kubelet.log", watched_env(work)
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    n = Node(root, host.path("/etc/kubernetes/manifests"), runtime.registry, admin_base, proc, log,
             kubelet_port=kubelet_port, argv=argv, env=env, healthz_port=healthz_port)
    _wait_up(n)
    return n
