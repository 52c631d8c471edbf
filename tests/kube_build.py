"""The control plane the cluster tests run (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, kubectl 1.37) and the kubeadm that joins tests/bootstrap's node, built
by deploy/build-kube.sh from the Go module proxy.

On a fresh machine the build compiles for many minutes. `make test` does not wait for it up
front: the session starts it at the lowest CPU priority as soon as it knows it will run tests
that need a node, so it compiles while the unit and integration tests mostly wait on containers.
The first test that needs the binaries waits for the build (the script holds a lock, so a second
run of it waits for the first and then finds the binaries)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "deploy" / "build-kube.sh"
CACHE = Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet"))  # the build script's
KUBE_VERSION = os.environ.get("KUBE_VERSION", "1.37.2")  # the build script's default too
KUBE_BIN = CACHE / f"kube-{KUBE_VERSION}" / "bin"
# The script's sets, in the order the background build makes them, and what each makes.
SETS = {"kube": ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"),
        "kubeadm": ("kubeadm",)}
LOG = CACHE / "build-kube.log"
# A cold build on 2 cores, competing with the tests until they wait for it.
BUILD_TIMEOUT = 45 * 60
POLL = 2.0

_background: subprocess.Popen | None = None


class KubeBuildError(RuntimeError):
    pass


def _have(kind: str) -> bool:
    return all((KUBE_BIN / b).is_file() for b in SETS[kind])


def start_in_background() -> bool:
    """Start the build unless every binary is there; True when it was started."""
    global _background
    if all(_have(kind) for kind in SETS) or _background is not None:
        return False
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(LOG, "w") as log:
        script = " && ".join(f'"$0" {kind}' for kind in SETS)
        # The lowest CPU and I/O priority: a test node's services must not wait on the compiler's
        # disk reads (their event loops are watched for 100 ms stalls).
        _background = subprocess.Popen(["nice", "-n", "19", "ionice", "-c", "3", "sh", "-c", script, str(BUILD)],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
    return True


def wait_until_built(kind: str = "kube") -> None:
    """Returns once the set's binaries are there: the background build has made them (its log
    says the set is done: a binary being copied into place is not yet one), or this call built
    them. KubeBuildError says why not, with the end of the build's log."""
    if _background is None:
        if _have(kind):
            return
        res = subprocess.run([str(BUILD), kind], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        if res.returncode != 0 or not _have(kind):
            raise KubeBuildError(f"deploy/build-kube.sh {kind} failed (exit {res.returncode}):\n"
                                 f"{res.stdout[-2000:]}{res.stderr[-3000:]}")
        return
    done = re.compile(rf"^{kind}: (built in|cached binaries)", re.M)
    deadline = time.monotonic() + BUILD_TIMEOUT
    while not (_have(kind) and done.search(_tail(LOG, 200))):
        code = _background.poll()
        if code is not None and not (_have(kind) and done.search(_tail(LOG, 200))):
            raise KubeBuildError(f"deploy/build-kube.sh {kind} failed (exit {code}):\n{_tail(LOG)}")
        if time.monotonic() > deadline:
            raise KubeBuildError(f"deploy/build-kube.sh {kind} still running after {BUILD_TIMEOUT}s; see {LOG}")
        time.sleep(POLL)


def stop_background() -> None:
    if _background is not None and _background.poll() is None:
        os.killpg(_background.pid, signal.SIGKILL)
        _background.wait(timeout=30)


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"(no log at {path})"
