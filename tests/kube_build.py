"""The control plane the cluster tests run (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, kubectl 1.37), built by deploy/build-kube.sh from the Go module proxy.

On a fresh machine the build compiles for many minutes. `make test` does not wait for it up
front: the session starts it at the lowest CPU priority as soon as it knows it will run tests
that need a node, so it compiles while the unit and integration tests mostly wait on containers.
The first test that needs the binaries waits for the build (the script holds a lock, so a second
run of it waits for the first and then finds the binaries)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "deploy" / "build-kube.sh"
CACHE = Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet"))  # the build script's
KUBE_VERSION = os.environ.get("KUBE_VERSION", "1.37.2")  # the build script's default too
KUBE_BIN = CACHE / f"kube-{KUBE_VERSION}" / "bin"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
LOG = CACHE / "build-kube.log"
# A cold build on 2 cores, competing with the tests until they wait for it.
BUILD_TIMEOUT = 45 * 60

_background: subprocess.Popen | None = None


class KubeBuildError(RuntimeError):
    pass


def built() -> bool:
    return all((KUBE_BIN / b).is_file() for b in BINARIES)


def start_in_background() -> bool:
    """Start the build unless the binaries are there; True when it was started."""
    global _background
    if built() or _background is not None:
        return False
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(LOG, "w") as log:
        _background = subprocess.Popen(["nice", "-n", "19", str(BUILD)], stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
    return True


def wait_until_built() -> None:
    """Returns once the binaries are there: the background build finished, or this call built
    them. KubeBuildError says why not, with the end of the build's log."""
    if built():
        return
    if _background is not None:
        try:
            code = _background.wait(timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise KubeBuildError(f"deploy/build-kube.sh still running after {BUILD_TIMEOUT}s; see {LOG}") from None
        if code == 0 and built():
            return
        raise KubeBuildError(f"deploy/build-kube.sh failed (exit {code}):\n{_tail(LOG)}")
    res = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if res.returncode != 0 or not built():
        raise KubeBuildError(f"deploy/build-kube.sh failed (exit {res.returncode}):\n{res.stdout[-2000:]}"
                             f"{res.stderr[-3000:]}")


def stop_background() -> None:
    if _background is not None and _background.poll() is None:
        os.killpg(_background.pid, signal.SIGKILL)
        _background.wait(timeout=30)


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"(no log at {path})"
