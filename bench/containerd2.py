"""containerd 2.x for the runs that compare pykubelet with the kubelet of today: the kubelet 1.36
and newer needs it, Debian bookworm ships 1.6, so `deploy/build-containerd.sh` builds one from the
Go module proxy into the cache. Both agents start their containerd, shim and runc by name, so the
build's directory first on PATH gives both the same build."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cluster.harness import CACHE

CONTAINERD_VERSION = os.environ.get("CONTAINERD_VERSION", "2.4.2")
BIN = CACHE / f"containerd-{CONTAINERD_VERSION}" / "bin"
TOOLS = ("containerd", "containerd-shim-runc-v2", "runc")


class Containerd2Missing(RuntimeError):
    pass


def put_first_on_path() -> str:
    """Make this process and its children use the cached containerd 2.x and its runc; returns
    `containerd --version`'s line."""
    missing = [t for t in TOOLS if not (BIN / t).exists()]
    if missing:
        raise Containerd2Missing(f"missing {', '.join(missing)} in {BIN}: run `deploy/build-containerd.sh` "
                                 f"(`make bench` and `make conformance` run it)")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != BIN]
    os.environ["PATH"] = os.pathsep.join([str(BIN), *path])
    return subprocess.run([str(BIN / "containerd"), "--version"], capture_output=True, text=True,
                          timeout=30).stdout.strip()
