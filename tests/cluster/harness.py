"""A real control plane for cluster tests: etcd and a kube-apiserver 1.37 built from the Go
module proxy (deploy/build-kube.sh, cached), on free loopback ports, with the authorization and
admission a kubeadm cluster has (Node,RBAC and NodeRestriction)."""

from __future__ import annotations

import signal
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.pki import PKI, kubeconfig
from tests.integration.conftest import free_port
from tests.kube_build import CACHE, KUBE_BIN, KUBE_VERSION, KubeBuildError, wait_until_built

__all__ = ["CACHE", "KUBE_BIN", "KUBE_VERSION"]
# How reports name the reference kubelet: "kubelet 1.37".
KUBELET_LABEL = "kubelet " + ".".join(KUBE_VERSION.split(".")[:2])


class HarnessError(RuntimeError):
    pass


def ensure_kube_binaries(kind: str = "kube") -> None:
    """The session builds them in the background (tests/kube_build.py): wait for that build.
    kind: the control plane ("kube") or "kubeadm"."""
    try:
        wait_until_built(kind)
    except KubeBuildError as exc:
        raise HarnessError(f"cannot build {kind} from the Go module proxy: {exc}") from None


@dataclass
class ControlPlane:
    root: Path
    node_name: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    api_port: int = 0
    etcd_port: int = 0
    # Verify kubelets' serving certificates against the cluster CA (--kubelet-certificate-authority).
    verify_kubelets: bool = False
    # A whole cluster (the conformance runs): ServiceAccount admission, and start_controllers()
    # runs the scheduler and the controller-manager (service accounts and their token secrets).
    full: bool = False
    # Where the API server listens (and what its certificate names): another address than
    # loopback when nodes run in network namespaces of their own (tests/multinode).
    listen_ip: str = "127.0.0.1"
    # More kube-apiserver flags (tests/bootstrap: --enable-bootstrap-token-auth).
    apiserver_extra: tuple[str, ...] = ()

    def start(self) -> None:
        ensure_kube_binaries()
        pki = self.pki = PKI(self.root / "pki")
        self.ca = pki.ca.cert
        serving = pki.issue("apiserver", "kube-apiserver", server=True, ips=sorted({"127.0.0.1", self.listen_ip}),
                            dns=["localhost", "kubernetes", "kubernetes.default"])
        sa_key = pki.service_account_key()
        self.admin = pki.issue("admin", "kubernetes-admin", ["system:masters"])
        self.node_cert = pki.issue("node", f"system:node:{self.node_name}", ["system:nodes"])
        # How the API server authenticates to kubelets (kubeadm's apiserver-kubelet-client).
        self.kubelet_client = pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                                        ["system:masters"])
        self.etcd_port, peer = free_port(), free_port()
        self.api_port = free_port()
        self.server = f"https://{self.listen_ip}:{self.api_port}"
        self.admin_kubeconfig = kubeconfig(self.root / "admin.kubeconfig", self.server, self.ca, self.admin, "admin")
        self.node_kubeconfig = kubeconfig(self.root / "node.kubeconfig", self.server, self.ca, self.node_cert,
                                          f"system:node:{self.node_name}")
        self._start_etcd(peer)
        self.apiserver_argv = [
            str(KUBE_BIN / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={self.listen_ip}", f"--secure-port={self.api_port}",
            f"--advertise-address={self.listen_ip}",
            # Since 1.2x the endpoint reconciler refuses a loopback address for the `kubernetes`
            # service's endpoints; on loopback nothing in a pod could reach it anyway.
            *(["--endpoint-reconciler-type=none"] if self.listen_ip.startswith("127.") else []),
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.ca}",
            f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            # Without a controller-manager nobody creates service accounts.
            *([] if self.full else ["--disable-admission-plugins=ServiceAccount"]),
            "--service-cluster-ip-range=10.96.0.0/24", "--allow-privileged=true",
            f"--kubelet-client-certificate={self.kubelet_client.cert}",
            f"--kubelet-client-key={self.kubelet_client.key}",
            "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
            *([f"--kubelet-certificate-authority={self.ca}"] if self.verify_kubelets else []),
            f"--cert-dir={self.root / 'apiserver-certs'}", *self.apiserver_extra]
        self.start_apiserver()
        self.sa_key = sa_key

    def start_controllers(self, controller_manager_args: tuple[str, ...] = ()) -> None:
        """kube-scheduler and kube-controller-manager (deploy/build-kube.sh builds them), each
        with its own identity as kubeadm gives them, serving nothing."""
        ensure_kube_binaries()
        for name, user in (("kube-scheduler", "system:kube-scheduler"),
                           ("kube-controller-manager", "system:kube-controller-manager")):
            cert = self.pki.issue(name, user)
            conf = kubeconfig(self.root / f"{name}.kubeconfig", self.server, self.ca, cert, user)
            argv = [str(KUBE_BIN / name), f"--kubeconfig={conf}", "--leader-elect=false", "--secure-port=0"]
            if name == "kube-controller-manager":
                argv += [f"--service-account-private-key-file={self.sa_key}", f"--root-ca-file={self.ca}",
                         "--use-service-account-credentials=true", *controller_manager_args]
            self._spawn(name, argv)
        # Ready when the default namespace has its service account (the token controller ran).
        self._wait(lambda: self.kubectl("get", "serviceaccount", "default", "-n", "default",
                                        check=False, timeout=10).returncode == 0,
                   "kube-controller-manager", 120)

    def kubeconfig_for_node(self, name: str) -> Path:
        """A kubeconfig for another node (e.g. a real kubelet beside pykubelet in benchmarks)."""
        cert = self.pki.issue(f"node-{name}", f"system:node:{name}", ["system:nodes"])
        return kubeconfig(self.root / f"{name}.kubeconfig", self.server, self.ca, cert, f"system:node:{name}")

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def _start_etcd(self, peer: int) -> None:
        self._spawn("etcd", [str(KUBE_BIN / "etcd"), f"--data-dir={self.root / 'etcd'}", "--name=test",
                             f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
                             f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
                             f"--listen-peer-urls=http://127.0.0.1:{peer}",
                             f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                             f"--initial-cluster=test=http://127.0.0.1:{peer}"])
        self._wait(lambda: urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=1).status == 200,
                   "etcd", 30)

    def start_apiserver(self) -> None:
        self._spawn("kube-apiserver", self.apiserver_argv)
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.admin.cert), str(self.admin.key))

        def ready() -> bool:
            return urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=2).status == 200
        self._wait(ready, "kube-apiserver", 90)

    def stop_apiserver(self) -> None:
        self._stop("kube-apiserver")

    def _wait(self, check, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise HarnessError(f"{name} exited ({self.procs[name].returncode}); see {self.root / (name + '.log')}:\n"
                                   + (self.root / f"{name}.log").read_text()[-2000:])
            try:
                if check():
                    return
            except Exception:
                pass
            time.sleep(0.3)
        raise HarnessError(f"{name} not ready after {timeout:.0f}s; see {self.root / (name + '.log')}")

    def _stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self._stop(name)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60,
                input_text: str | None = None) -> subprocess.CompletedProcess:
        res = subprocess.run([str(KUBE_BIN / "kubectl"), f"--kubeconfig={self.admin_kubeconfig}", *args],
                             capture_output=True, text=True, timeout=timeout, input=input_text)
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {res.stderr}")
        return res
