"""The real kubelet (1.20, built from Debian's source package by deploy/build-kube.sh) as the
baseline agent: on its own containerd started with the same generated config pykubelet uses, so
both agents drive the same containerd build with the same CNI network, one after the other."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from pathlib import Path

from services.network.cni_config import write_conflist
from services.supervisor.node import LocalNode, UpOptions
from services.supervisor.teardown import remove_all_pods, remove_bridge
from shared.cni import BRIDGE, cni_conf_dir, cni_ipam_dir
from shared.config import NodeSettings
from tests.cluster.harness import KUBE_BIN, ControlPlane
from tests.integration.conftest import POD_CIDR, free_port

NAME = "kubeletnode"


class RealKubelet:
    """cp None: standalone mode (static pods from `static_dir` only, no API server)."""

    def __init__(self, root: Path, cp: ControlPlane | None, static_dir: Path | None = None) -> None:
        self.root = root
        self.cp = cp
        self.static_dir = static_dir
        self.port = free_port()
        args = argparse.Namespace(config=None, hostname_override=None, pleg_relist_period=None, kubeconfig=None)
        self.infra = LocalNode(UpOptions(args=args, settings=NodeSettings(root_dir=root), nats_port=free_port(),
                                         registry_port=free_port(), admin_port_base=None, push_images=True,
                                         keep_pods=True, wait_pods=0))
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return self.infra.containerd.endpoint

    def image(self, name: str) -> str:
        return f"{self.infra.registry}/pykubelet/{ {'busybox': 'busybox:1.36', 'web': 'web:1.0'}[name] }"

    async def start(self) -> None:
        self.infra.log_dir.mkdir(parents=True, exist_ok=True)
        self.infra.run_dir.mkdir(parents=True, exist_ok=True)
        await self.infra.start_registry()
        await asyncio.to_thread(self.infra.push_images)
        await self.infra.start_containerd()
        write_conflist(cni_conf_dir(self.root), POD_CIDR, cni_ipam_dir(self.root))
        config = self.root / "kubelet.yaml"
        # Today's defaults for the API client (kubeAPIQPS 50 / burst 100), parallel pulls like
        # pykubelet; anonymous read-only auth on its own ports (nothing else talks to it here).
        config.write_text(f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}
authorization: {{mode: AlwaysAllow}}
cgroupDriver: cgroupfs
failSwapOn: false
port: {self.port}
healthzPort: {free_port()}
readOnlyPort: 0
staticPodPath: "{self.static_dir or ''}"
fileCheckFrequency: 20s
kubeAPIQPS: 50
kubeAPIBurst: 100
serializeImagePulls: false
""")
        log = open(self.root / "kubelet.log", "w")
        self.proc = subprocess.Popen(
            [str(KUBE_BIN / "kubelet"),
             *([f"--kubeconfig={self.cp.kubeconfig_for_node(NAME)}"] if self.cp else []), f"--config={config}",
             "--container-runtime=remote", f"--container-runtime-endpoint={self.endpoint}",
             f"--root-dir={self.root / 'kubelet'}", f"--hostname-override={NAME}",
             f"--pod-infra-container-image={self.infra.sandbox_image}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def api(self) -> str:
        """The kubelet's own HTTPS API (anonymous, AlwaysAllow here): /pods, /metrics."""
        return f"https://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            await asyncio.to_thread(self.proc.wait, 30)
        # The kubelet's pods carry no pykubelet label: remove every sandbox of this containerd.
        await remove_all_pods(self.endpoint, grace=1, labels={})
        remove_bridge(BRIDGE)
        await self.infra.down()
        for mount in sorted((l.split()[1] for l in open("/proc/mounts") if str(self.root) in l), reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
