"""A mount namespace that stands for a fresh host: /etc, /var/lib and /usr/local are overlays of
the machine's, so what kubeadm and the kubelet write to /etc/kubernetes and /var/lib/kubelet (and
the kubelet binary `pykubelet install --as-kubelet` puts in /usr/local/bin) lands in
upper directories under `work` (readable from the machine, at path()), and the machine's own
/etc and /var/lib are untouched. Every process of the "host" (its containerd, kubeadm, the
kubelet) runs inside through enter()."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.integration.conftest import stop_process, wait_for

OVERLAID = ("/etc", "/var/lib", "/usr/local")


class PrivateHostError(RuntimeError):
    pass


@dataclass
class PrivateHost:
    work: Path
    _holder: subprocess.Popen | None = None

    def _dirs(self, where: str) -> tuple[Path, Path]:
        name = where.strip("/").replace("/", "-")
        return self.work / f"{name}-upper", self.work / f"{name}-work"

    def start(self) -> None:
        ready = self.work / "namespace-ready"
        mounts = []
        for where in OVERLAID:
            upper, scratch = self._dirs(where)
            upper.mkdir(parents=True)
            scratch.mkdir()
            mounts.append(f"mount -t overlay overlay -o lowerdir={where},upperdir={upper},workdir={scratch} {where}")
        # The holder keeps the namespace alive; `sleep` is what is left of it once the mounts stand.
        script = " && ".join([*mounts, f"touch {ready}", "exec sleep 86400"])
        log = self.work / "namespace.log"
        with open(log, "w") as out:
            self._holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                            stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: ready.exists() or self._holder.poll() is not None, 20, "the private host's mounts")
        except AssertionError:
            pass
        if not ready.exists():
            self.stop()
            raise PrivateHostError(f"cannot make the private host's mount namespace: {log.read_text()[-2000:]}")

    def enter(self) -> list[str]:
        """The prefix that runs a command inside."""
        assert self._holder is not None, "not started"
        return ["nsenter", f"--target={self._holder.pid}", "--mount", "--"]

    def path(self, inside: str) -> Path:
        """Where a file the host's processes wrote under an overlaid directory is, seen from the
        machine (a file of the machine's own that nothing inside changed is not there)."""
        for where in OVERLAID:
            if inside == where or inside.startswith(where + "/"):
                return self._dirs(where)[0] / inside[len(where):].lstrip("/")
        raise ValueError(f"{inside} is not under {', '.join(OVERLAID)}")

    def stop(self) -> None:
        if self._holder is not None:
            stop_process(self._holder, timeout=10)
            self._holder = None
