"""`pykubelet install --as-kubelet`: pykubelet as the program kubelet.service runs, so that
`kubeadm join`, `kubeadm upgrade node` and `kubeadm reset` drive it as they drive the kubelet.

What a kubelet package installs, and what this writes in its place:
- the kubelet binary (/usr/bin/kubelet, or /usr/local/bin/kubelet as the docs' install without a
  package manager puts it): a two-line script that runs `pykubelet kubelet` with the arguments it
  is given;
- kubelet.service and its kubeadm drop-in kubelet.service.d/10-kubeadm.conf, the standard ones:
  the kubeconfig and config arguments, kubeadm's flags from /var/lib/kubelet/kubeadm-flags.env and
  the operator's from /etc/default/kubelet. A kubelet.service a package already installed is kept.
A kubelet binary that is not this script is never overwritten: the operator moves it aside.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_KUBELET_PATH = "/usr/bin/kubelet"
UNIT = "kubelet.service"
DROP_IN = "kubelet.service.d/10-kubeadm.conf"
# Where a kubelet package puts its unit (Debian's and Fedora's); one there is the operator's.
PACKAGE_UNIT_DIRS = ("/usr/lib/systemd/system", "/lib/systemd/system")
MARKER = "# pykubelet as the kubelet: written by `pykubelet install --as-kubelet`"


class AsKubeletError(RuntimeError):
    """The kubelet's place is taken; the message says by what and what to do."""


def wrapper(python: str, src: str) -> str:
    """The kubelet binary: `pykubelet kubelet` with the kubelet's arguments, from any directory."""
    return (f"#!/bin/sh\n{MARKER}\n"
            f"exec env PYTHONPATH={shlex.quote(src)} {shlex.quote(python)} -m services.cli.main kubelet \"$@\"\n")


def unit(kubelet_path: str) -> str:
    return f"""{MARKER}
[Unit]
Description=kubelet: The Kubernetes Node Agent (pykubelet)
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart={kubelet_path}
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""


def drop_in(kubelet_path: str) -> str:
    """kubeadm's drop-in, as kubeadm's packages ship it: kubeadm writes the files it names."""
    return f"""{MARKER}
# kubeadm's drop-in for kubelet.service: `kubeadm init` and `kubeadm join` write the files it names.
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# KUBELET_KUBEADM_ARGS, written by kubeadm.
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# KUBELET_EXTRA_ARGS, the operator's last-resort flags.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart={kubelet_path} $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""


def is_ours(path: Path) -> bool:
    """A regular file (never a link, a FIFO or a device, which reading could hang on) with the marker."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            return MARKER.encode() in f.read(4096)
    except OSError:
        return False


@dataclass
class AsKubelet:
    kubelet_path: Path
    unit_dir: Path
    python: str
    src: str
    package_unit_dirs: tuple[str, ...] = field(default_factory=lambda: PACKAGE_UNIT_DIRS)
    kept: list[str] = field(default_factory=list)  # units already there (a package's, the operator's)

    def _existing(self, name: str) -> list[Path]:
        """name (UNIT or DROP_IN) where systemd would find it, in the unit dir or a package's."""
        dirs = [self.unit_dir, *map(Path, self.package_unit_dirs)]
        return [d / name for d in dirs if (d / name).exists()]

    def files(self) -> dict[Path, tuple[str, int]]:
        """What install writes: path -> (content, mode). The units only where none but ours is,
        so a package's kubelet.service and drop-in stay as they are."""
        out = {self.kubelet_path: (wrapper(self.python, self.src), 0o755)}
        for name, content in ((UNIT, unit(str(self.kubelet_path))), (DROP_IN, drop_in(str(self.kubelet_path)))):
            others = [p for p in self._existing(name) if not is_ours(p)]
            if others:
                self.kept += [str(p) for p in others]
            else:
                out[self.unit_dir / name] = (content, 0o644)
        return out

    def check(self) -> None:
        """Refuse to replace a kubelet that is not pykubelet, or to sit beside units that run
        another program."""
        if self.kubelet_path.is_symlink() or (self.kubelet_path.exists() and not is_ours(self.kubelet_path)):
            raise AsKubeletError(
                f"{self.kubelet_path} is another program (the kubelet package's?): move it aside (for example to "
                f"{self.kubelet_path}.real) and run `pykubelet install --as-kubelet` again, or give --kubelet-path")
        for path in self._existing(UNIT) + self._existing(DROP_IN):
            if not is_ours(path) and str(self.kubelet_path) not in path.read_text():
                raise AsKubeletError(f"{path} runs another program than {self.kubelet_path}: give --kubelet-path "
                                     "with the program it runs, or remove it")

    def remove(self) -> list[str]:
        """Remove what install wrote (the script and the units, where they are ours)."""
        removed = []
        for path in (self.kubelet_path, self.unit_dir / UNIT, self.unit_dir / DROP_IN):
            if not path.is_symlink() and is_ours(path):
                os.unlink(path)
                removed.append(str(path))
        d = self.unit_dir / Path(DROP_IN).parent
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
        return removed
