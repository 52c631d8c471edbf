"""The container runtime a kubeadm host runs on its own (containerd.service there): a containerd
and a registry with the demo images, started and stopped by the tests, never by pykubelet. A node
started with `pykubelet kubelet --container-runtime-endpoint` uses it as the kubelet would."""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, TypeVar

from cri_api.v1 import api_pb2 as cri_api

from services.supervisor.containerd_config import ContainerdLayout, write_config
from services.supervisor.teardown import teardown_node
from shared.host.cni import CNI_BIN_DIR, cni_conf_dir
from shared.host.facts import kernel_refuses_negative_oom_score_adj
from shared.runtime.cri import CRIClient, CRIError
from shared.runtime.images.build import IMAGES
from tests.integration.conftest import PYKUBELET, REPO, free_port, stop_process, wait_for

START_TIMEOUT = 60.0
T = TypeVar("T")


class HostRuntimeError(RuntimeError):
    pass


@dataclass
class HostRuntime:
    root: Path  # the runtime's files: <root>/containerd
    # The kubelet's root dir as the runtime sees it: the network service writes the pod network's
    # CNI config under it, which this runtime reads.
    kubelet_root: Path
    wrap: tuple[str, ...] = ()  # what runs containerd (the private host's namespace)
    registry: str = ""
    _procs: tuple[subprocess.Popen, ...] = ()

    @property
    def layout(self) -> ContainerdLayout:
        return ContainerdLayout(self.root / "containerd")

    @property
    def endpoint(self) -> str:
        return self.layout.endpoint

    def start(self) -> None:
        logs = self.root.with_name(f"{self.root.name}-host-runtime")
        logs.mkdir(exist_ok=True)
        port = free_port()
        self.registry = f"127.0.0.1:{port}"
        reg = logs / "registry.yml"
        reg.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {logs / 'data'}\n"
                       f"http:\n  addr: {self.registry}\n")
        registry = self._spawn(["docker-registry", "serve", str(reg)], logs / "registry.log")
        push = subprocess.run([*PYKUBELET, "push-images", "--registry", self.registry], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        if push.returncode != 0:
            raise HostRuntimeError(f"pushing the demo images to {self.registry} failed: {push.stderr[-2000:]}")
        pause = IMAGES["pause"]
        write_config(self.layout, cni_conf_dir=cni_conf_dir(self.kubelet_root), cni_bin_dir=CNI_BIN_DIR,
                     sandbox_image=f"{self.registry}/{pause.repository}:{pause.tag}", registry=self.registry,
                     restrict_oom=kernel_refuses_negative_oom_score_adj())
        self._start_containerd(logs)
        assert registry.poll() is None, f"the registry exited; see {logs / 'registry.log'}"

    def _start_containerd(self, logs: Path) -> None:
        containerd = self._spawn([*self.wrap, "containerd", "--config", str(self.layout.config)],
                                 logs / "containerd.log", append=True)
        try:
            wait_for(lambda: containerd.poll() is None and self.answers(), START_TIMEOUT,
                     f"the host's containerd to answer on {self.endpoint}")
        except AssertionError as exc:
            raise HostRuntimeError(f"{exc}; see {logs / 'containerd.log'}") from None

    def start_again(self) -> None:
        """containerd.service's Restart=: containerd 2.x exits when its CNI config directory is
        removed, which `kubeadm reset` does here (it is under the kubelet's root)."""
        if not self.answers():
            self._start_containerd(self.root.with_name(f"{self.root.name}-host-runtime"))

    def _spawn(self, argv: list[str], log: Path, append: bool = False) -> subprocess.Popen:
        with open(log, "a" if append else "w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self._procs = (*self._procs, proc)
        return proc

    def call(self, fn: Callable[[CRIClient], Awaitable[T]]) -> T | None:
        """fn's answer from the runtime; None when the runtime does not answer."""
        async def go() -> T | None:
            cri = CRIClient(self.endpoint, timeout=5)
            try:
                return await fn(cri)
            except CRIError:
                return None
            finally:
                await cri.close()
        return asyncio.run(go())

    def answers(self) -> bool:
        return self.call(lambda cri: cri.version()) is not None

    def running_containers(self) -> dict[str, str]:
        """Container name -> id of every running container the runtime has."""
        found = self.call(lambda cri: cri.list_containers()) or []
        return {c.metadata.name: c.id for c in found if c.state == cri_api.CONTAINER_RUNNING}

    def stop(self, pod_logs_dir: str) -> None:
        """The pods the node left (a kubelet's stop leaves them, kubeadm reset removes them),
        then the runtime and registry."""
        if self._procs and self.answers():
            asyncio.run(teardown_node(self.kubelet_root, self.endpoint, pod_logs_dir))
        for proc in reversed(self._procs):
            stop_process(proc)
        self._procs = ()
