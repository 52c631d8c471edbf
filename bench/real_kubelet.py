"""The real kubelet (1.37, built from the Go module proxy by `deploy/build-kube.sh kubelet`) as the
baseline agent: on its own containerd started with the same generated config pykubelet uses, so
both agents drive the same containerd build with the same CNI network, one after the other."""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import subprocess
from pathlib import Path

from bench.node_api import CONTAINER_LOG_MAX_SIZE
from services.network.cni_config import write_conflist
from services.supervisor.node import LocalNode, UpOptions
from services.supervisor.teardown import remove_all_pods, remove_bridge
from shared.config.settings import NodeSettings
from shared.host.cni import BRIDGE, cni_conf_dir, cni_ipam_dir
from shared.host.mounts import MountError, remove_tree
from tests.cluster.harness import KUBE_BIN, ControlPlane
from tests.integration.conftest import POD_CIDR, free_port

NAME = "kubeletnode"
# The kubelet opens its device-plugin socket here whatever --root-dir says.
HARD_CODED_DIR = Path("/var/lib/kubelet")


class RealKubelet:
    """cp None: standalone mode (static pods from `static_dir` only, no API server)."""

    def __init__(self, root: Path, cp: ControlPlane | None, static_dir: Path | None = None,
                 extra_config: str = "") -> None:
        """extra_config: more KubeletConfiguration fields (YAML lines), as for pykubelet."""
        self.root = root
        self.extra_config = extra_config
        self.cp = cp
        self.static_dir = static_dir
        self.port = free_port()
        args = argparse.Namespace(config=None, hostname_override=None, pleg_relist_period=None, kubeconfig=None)
        self.infra = LocalNode(UpOptions(args=args, settings=NodeSettings(root_dir=root), nats_port=free_port(),
                                         registry_port=free_port(), admin_port_base=None, push_images=True,
                                         keep_pods=True, wait_pods=0))
        self.proc: subprocess.Popen | None = None
        self._made_hard_coded_dir = False

    @property
    def endpoint(self) -> str:
        return self.infra.containerd.endpoint

    def image(self, name: str) -> str:
        return f"{self.infra.registry}/pykubelet/{ {'busybox': 'busybox:1.36', 'web': 'web:1.0'}[name] }"

    async def start(self) -> None:
        self.infra.log_dir.mkdir(parents=True, exist_ok=True)
        self.infra.run_dir.mkdir(parents=True, exist_ok=True)
        await self.infra.start_registry()
        await self.infra.push_images()
        await self.infra.start_containerd()
        write_conflist(cni_conf_dir(self.root), POD_CIDR, cni_ipam_dir(self.root))
        config = self.root / "kubelet.yaml"
        # Today's defaults for the API client (kubeAPIQPS 50 / burst 100), parallel pulls like
        # pykubelet. Its API on its own port: in cluster mode secured as pykubelet's is (and a
        # kubeadm node's): client certificates of the cluster CA, webhook authentication and
        # authorization; standalone (no API server to ask) anonymous and AlwaysAllow.
        if self.cp:
            auth = (f"authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: true}}, "
                    f"x509: {{clientCAFile: \"{self.cp.ca}\"}}}}\nauthorization: {{mode: Webhook}}")
        else:
            auth = ("authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}\n"
                    "authorization: {mode: AlwaysAllow}")
        config.write_text(f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
{auth}
cgroupDriver: cgroupfs
# These hosts are cgroup v1, which the kubelet refuses since 1.35 unless told otherwise.
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: "{self.endpoint}"
podLogsDir: "{self.root / 'pod-logs'}"
port: {self.port}
healthzPort: {free_port()}
readOnlyPort: 0
staticPodPath: "{self.static_dir or ''}"
fileCheckFrequency: 20s
kubeAPIQPS: 50
kubeAPIBurst: 100
# No KUBE-* iptables chains on this host: the benchmark must leave it as it found it.
makeIPTablesUtilChains: false
serializeImagePulls: false
# As pykubelet's in the benchmarks: large enough that the kubelet API's 50 MiB log is one file.
containerLogMaxSize: {CONTAINER_LOG_MAX_SIZE}
containerLogMaxFiles: 5
{self.extra_config}""")
        self._made_hard_coded_dir = not HARD_CODED_DIR.exists()
        log = open(self.root / "kubelet.log", "w")
        self.proc = subprocess.Popen(
            [str(KUBE_BIN / "kubelet"),
             *([f"--kubeconfig={self.cp.kubeconfig_for_node(NAME)}"] if self.cp else []), f"--config={config}",
             f"--root-dir={self.root / 'kubelet'}", f"--cert-dir={self.root / 'pki'}",
             f"--hostname-override={NAME}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def api(self) -> str:
        """The kubelet's own HTTPS API: /pods, /metrics."""
        return f"https://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            await asyncio.to_thread(self.proc.wait, 30)
        # The kubelet's pods carry no pykubelet label: remove every sandbox of this containerd.
        await remove_all_pods(self.endpoint, grace=1, labels={})
        remove_stale_masquerade_rules()
        remove_bridge(BRIDGE)
        await self.infra.down()
        for mount in sorted((m.split()[1] for m in open("/proc/mounts") if str(self.root) in m), reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
        if self._made_hard_coded_dir:  # it was not there before this kubelet: everything in it is its
            try:
                remove_tree(HARD_CODED_DIR)
            except MountError as exc:
                print(f"bench: {exc}")


def remove_stale_masquerade_rules(network: str = "pykubelet") -> int:
    """The bridge plugin's per-sandbox NAT rules (POSTROUTING -> CNI-<hash> chain) of `network`.

    A kubelet that SIGKILLs a removed static pod's processes through its cgroup leaves
    sandboxes whose network teardown never removes these (sometimes only the POSTROUTING jump goes,
    leaving the chain). Once this containerd has no sandbox left, every such rule and chain is
    stale. Returns how many chains were removed."""
    def nat(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["iptables", "-t", "nat", *args], capture_output=True, text=True, timeout=30)

    marker = f'name: \\"{network}\\"'
    for line in nat("-S").stdout.splitlines():
        if line.startswith("-A POSTROUTING") and marker in line and " -j CNI-" in line:
            nat("-D", *shlex.split(line)[1:])
    lines = nat("-S").stdout.splitlines()
    per_sandbox = {line.split()[1] for line in lines if re.fullmatch(r"-N CNI-[0-9a-f]{24}", line)}
    rules: dict[str, list[str]] = {c: [] for c in per_sandbox}
    referenced = set()
    for line in lines:
        if line.startswith("-A "):
            chain = line.split()[1]
            if chain in rules:
                rules[chain].append(line)
            if " -j CNI-" in line:
                referenced.add(line.rsplit(" -j ", 1)[1].split()[0])
    stale = [c for c, r in rules.items() if c not in referenced and all(marker in x for x in r)]
    for chain in stale:
        nat("-F", chain)
        nat("-X", chain)
    return len(stale)
