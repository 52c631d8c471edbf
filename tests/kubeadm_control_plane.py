"""A control plane prepared for `kubeadm join` the way `kubeadm init` prepares it, against the tests'
API server (tests/cluster/harness.py): kubeadm's own `init phase upload-config kubeadm`,
`upload-config kubelet` and `bootstrap-token` write the ConfigMaps, the bootstrap token and the
RBAC a join needs. Used by tests/bootstrap (a private host) and tests/vm (a systemd guest)."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import yaml

from shared.host.facts import node_ip
from tests.cluster.harness import KUBE_BIN, KUBE_VERSION, ControlPlane, HarnessError

TOKEN_ID, TOKEN_SECRET = "pk7bt1", "0123456789abcdef"
BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token"
# What the API server and kube-controller-manager need for a join: bootstrap tokens, and the CSR
# signer (the controller-manager's csrapproving and csrsigning controllers) with the cluster CA.
APISERVER_ARGS = ("--enable-bootstrap-token-auth=true",)


def signing_args(cp: ControlPlane, duration_seconds: int) -> tuple[str, ...]:
    return (f"--cluster-signing-cert-file={cp.pki.ca.cert}", f"--cluster-signing-key-file={cp.pki.ca.key}",
            f"--cluster-signing-duration={duration_seconds}s")


def kubeadm_config(cp: ControlPlane, cri_socket: str, kubelet_port: int, healthz_port: int,
                   cgroup_driver: str = "cgroupfs", **kubelet: object) -> str:
    """What `kubeadm init` would be given: the token, the cluster, and the kubelet configuration
    every node that joins gets (kubelet-config): the node's cgroup driver and its ports, and any
    more KubeletConfiguration fields given."""
    port = cp.server.rsplit(":", 1)[1]
    return yaml.safe_dump_all([
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration",
         "bootstrapTokens": [{"token": f"{TOKEN_ID}.{TOKEN_SECRET}", "groups": [BOOTSTRAP_GROUP],
                              "usages": ["signing", "authentication"]}],
         # kubeadm refuses a loopback address here; the API server itself stays on loopback.
         "localAPIEndpoint": {"advertiseAddress": node_ip(), "bindPort": int(port)},
         "nodeRegistration": {"criSocket": cri_socket}},
        {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration",
         "kubernetesVersion": f"v{KUBE_VERSION}", "controlPlaneEndpoint": f"127.0.0.1:{port}",
         "networking": {"serviceSubnet": "10.96.0.0/24"}},
        {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
         "cgroupDriver": cgroup_driver, "port": kubelet_port, "healthzPort": healthz_port, **kubelet}])


def discovery_file(path: Path, cp: ControlPlane) -> Path:
    """The cluster as `kubeadm join --discovery-file` takes it: server and CA, and a user without
    credentials (join reads cluster-info anonymously, then uses the token)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "join",
        "clusters": [{"name": "kubernetes", "cluster": {
            "server": cp.server, "certificate-authority-data": base64.b64encode(cp.ca.read_bytes()).decode()}}],
        "contexts": [{"name": "join", "context": {"cluster": "kubernetes", "user": "anonymous"}}],
        "users": [{"name": "anonymous", "user": {}}]}))
    return path


def prepare_control_plane(cp: ControlPlane, work: Path, config: str) -> None:
    """`kubeadm init`'s phases that a join needs, against the running API server."""
    (work / "kubeadm.yaml").write_text(config)
    for phase in (("upload-config", "kubeadm"), ("upload-config", "kubelet"), ("bootstrap-token",)):
        res = subprocess.run([str(KUBE_BIN / "kubeadm"), "init", "phase", *phase, f"--config={work / 'kubeadm.yaml'}",
                              f"--kubeconfig={cp.admin_kubeconfig}"], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise HarnessError(f"kubeadm init phase {' '.join(phase)} failed: {res.stdout[-1500:]}{res.stderr[-2500:]}")


def join_argv(cp: ControlPlane, work: Path, cri_socket: str, node_name: str) -> list[str]:
    """`kubeadm join` with the discovery file and bootstrap token of this control plane, preflight
    errors ignored (the test hosts are not clean kubeadm hosts)."""
    return [str(KUBE_BIN / "kubeadm"), "join", f"--discovery-file={discovery_file(work / 'discovery.conf', cp)}",
            f"--tls-bootstrap-token={TOKEN_ID}.{TOKEN_SECRET}", f"--cri-socket={cri_socket}",
            f"--node-name={node_name}", "--ignore-preflight-errors=all"]
