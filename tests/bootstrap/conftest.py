"""A control plane set up as `kubeadm init` sets one up for joining nodes: bootstrap-token
authentication, the RBAC bindings kubeadm makes for bootstrap tokens and for nodes renewing their
own certificates, and kube-controller-manager approving and signing kubelet client CSRs with
the cluster CA. The node starts as `kubeadm join` starts the kubelet: `pykubelet kubelet` with
kubeadm's drop-in flags, the config.yaml kubeadm 1.37 writes, a bootstrap kubeconfig (a token),
no kubeconfig, and the host's own container runtime (tests/bootstrap/host_runtime.py)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from shared.admin import SERVICES
from tests.bootstrap.host_runtime import HostRuntime, HostRuntimeError
from tests.cluster.harness import ControlPlane, HarnessError
from tests.integration.conftest import (NODE_NAME, PYKUBELET, REPO, Node, _wait_up, free_port, free_port_range,
                                        require_node_prerequisites, stop_node, wait_for)
from tests.integration.event_loops import watched_env

TOKEN_ID, TOKEN_SECRET = "pk7bt1", "0123456789abcdef"
# The signer's certificate lifetime. Its certificates start 5 minutes back (the signer's
# backdate), so one lasts 7.5 minutes and is renewed 15-105 s after it is issued (70-90%).
SIGNING_DURATION = 150
BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token"


def _binding(name: str, role: str, group: str) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}


# What kubeadm's bootstrap-token phase creates (cmd/kubeadm/app/phases/bootstraptoken/node).
KUBEADM_OBJECTS = [
    {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
     "metadata": {"name": f"bootstrap-token-{TOKEN_ID}", "namespace": "kube-system"},
     "stringData": {"token-id": TOKEN_ID, "token-secret": TOKEN_SECRET, "usage-bootstrap-authentication": "true",
                    "usage-bootstrap-signing": "true", "auth-extra-groups": BOOTSTRAP_GROUP}},
    _binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", BOOTSTRAP_GROUP),
    _binding("kubeadm:node-autoapprove-bootstrap",
             "system:certificates.k8s.io:certificatesigningrequests:nodeclient", BOOTSTRAP_GROUP),
    _binding("kubeadm:node-autoapprove-certificate-rotation",
             "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
]


# The config.yaml `kubeadm join` 1.37 writes to /var/lib/kubelet/config.yaml.
KUBEADM_CONFIG = Path(__file__).resolve().parents[1] / "unit" / "data" / "kubeadm-1.37-kubelet-config.yaml"


@dataclass
class Joined:
    cp: ControlPlane
    runtime: HostRuntime
    node: Node
    kubeconfig: Path
    bootstrap_kubeconfig: Path
    cert_dir: Path

    def get(self, *args: str) -> dict:
        return json.loads(self.cp.kubectl("get", *args, "-o", "json").stdout)

    def ready(self) -> str:
        res = self.cp.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        if res.returncode != 0:
            return "absent"
        conds = json.loads(res.stdout)["status"].get("conditions", [])
        return next((c["status"] for c in conds if c["type"] == "Ready"), "Unknown")


def bootstrap_kubeconfig(path: Path, server: str, ca: Path) -> Path:
    """As kubeadm join writes /etc/kubernetes/bootstrap-kubelet.conf: the CA and the token."""
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "tls-bootstrap-token-user@kubernetes",
           "clusters": [{"name": "kubernetes", "cluster": {"server": server, "certificate-authority": str(ca)}}],
           "contexts": [{"name": "tls-bootstrap-token-user@kubernetes",
                         "context": {"cluster": "kubernetes", "user": "tls-bootstrap-token-user"}}],
           "users": [{"name": "tls-bootstrap-token-user", "user": {"token": f"{TOKEN_ID}.{TOKEN_SECRET}"}}]}
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="package")
def joined(tmp_path_factory) -> Iterator[Joined]:
    cp = ControlPlane(tmp_path_factory.mktemp("bootstrap-control-plane"), NODE_NAME,
                      apiserver_extra=("--enable-bootstrap-token-auth=true",))
    node = None
    try:
        try:
            cp.start()
            for obj in KUBEADM_OBJECTS:
                cp.kubectl("apply", "-f", "-", input_text=json.dumps(obj))
            # csrapproving and csrsigning are among the controllers kube-controller-manager runs.
            cp.start_controllers((f"--cluster-signing-cert-file={cp.pki.ca.cert}",
                                  f"--cluster-signing-key-file={cp.pki.ca.key}",
                                  f"--cluster-signing-duration={SIGNING_DURATION}s"))
        except HarnessError as exc:
            pytest.fail(f"cannot start the test control plane: {exc}")
        root = tmp_path_factory.mktemp("bootstrap-node")  # as /var/lib/kubelet
        etc = root.with_name(f"{root.name}-etc")  # as /etc/kubernetes, outside the node's root
        (etc / "manifests").mkdir(parents=True)
        runtime = HostRuntime(root)
        try:
            runtime.start()
        except HostRuntimeError as exc:
            pytest.fail(f"cannot start the host's container runtime: {exc}")
        bk = bootstrap_kubeconfig(etc / "bootstrap-kubelet.conf", cp.server, cp.ca)
        kubeconfig = etc / "kubelet.conf"
        node = launch_kubelet(root, etc, runtime, cp.ca,
                              [f"--bootstrap-kubeconfig={bk}", f"--kubeconfig={kubeconfig}"])
        j = Joined(cp, runtime, node, kubeconfig, bk, root / "pki")
        wait_for(lambda: j.ready() == "True", 90, "the node to bootstrap, register and turn Ready")
        yield j
    finally:
        if node is not None:
            stop_node(node)
            runtime.stop(str(node.root / "pod-logs"))
        cp.stop()


def launch_kubelet(root: Path, etc: Path, runtime: HostRuntime, ca: Path, flags: list[str]) -> Node:
    """`pykubelet kubelet` as kubelet.service runs it after `kubeadm join`: kubeadm's config.yaml
    in the root dir (its cgroup driver, CA file and ports changed for this host and test), the
    drop-in's flags, then kubeadm-flags.env's runtime endpoint."""
    require_node_prerequisites()
    config = yaml.safe_load(KUBEADM_CONFIG.read_text())
    config["cgroupDriver"] = "cgroupfs"  # systemd is issue-34 work: refused by name today
    (etc / "pki").mkdir(exist_ok=True)
    (etc / "pki" / "ca.crt").write_bytes(ca.read_bytes())  # as kubeadm join writes /etc/kubernetes/pki/ca.crt
    config["authentication"]["x509"]["clientCAFile"] = str(etc / "pki" / "ca.crt")
    config["staticPodPath"] = str(etc / "manifests")
    config["healthzPort"], config["port"] = free_port(), free_port()
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    nats_port, admin_base = free_port(), free_port_range(len(SERVICES))
    argv = [*PYKUBELET, "kubelet", *flags, f"--config={root / 'config.yaml'}", f"--root-dir={root}",
            f"--container-runtime-endpoint={runtime.endpoint}", f"--hostname-override={NODE_NAME}",
            # pykubelet's own: the bus and admin ports free here, the pods' logs beside the test's.
            f"--nats-url=nats://127.0.0.1:{nats_port}", f"--admin-port-base={admin_base}",
            f"--pod-logs-dir={root / 'pod-logs'}"]
    log, env = root.with_name(f"{root.name}-kubelet.log"), watched_env(root)
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    n = Node(root, etc / "manifests", runtime.registry, admin_base, proc, log, kubelet_port=config["port"],
             argv=argv, env=env, healthz_port=config["healthzPort"])
    _wait_up(n)
    return n
