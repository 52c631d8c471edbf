"""A real systemd to test the units in: a Debian rootfs (deploy/nspawn-rootfs.sh, cached outside
the checkout) booted with systemd-nspawn, its own network namespace and a throwaway overlay over
the image, this checkout and its interpreter bound read-only at the same paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("PYKUBELET_CACHE_DIR", "/var/cache/pykubelet")) / "nspawn"
BOOT_TIMEOUT = 90
CONTAINER_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROOTFS_BUILD_TIMEOUT = 600


class Machine:
    """One booted container; commands run inside it with nsenter."""

    def __init__(self, rootfs: Path, state: Path, log: Path, tools: list[Path]) -> None:
        self.rootfs, self.state, self.log, self.tools = rootfs, state, log, tools
        self.proc: subprocess.Popen | None = None
        self.leader = 0

    def boot(self) -> None:
        binds = [f"--bind-ro={REPO}", f"--bind={self.state}:/var/lib/pykubelet",
                 *(f"--bind-ro={t}" for t in self.tools)]
        if not sys.base_prefix.startswith("/usr"):  # an interpreter of its own (pyenv): bring it along
            binds.append(f"--bind-ro={sys.base_prefix}")
        # --keep-unit --register=no: this host's PID 1 is not systemd (no machined to register with).
        # --system-call-filter: nspawn's seccomp filter refuses the keyring calls runc makes for
        # every container ("unable to join session keyring: operation not permitted"); measured,
        # those three are all a nested containerd + runc needs besides writable cgroups (see
        # deploy/nspawn-rootfs.sh). --private-network gives the node its own network namespace,
        # with CAP_NET_ADMIN for its bridge.
        argv = ["systemd-nspawn", "--quiet", "--keep-unit", "--register=no", "--boot", "--volatile=overlay",
                "--private-network", "--system-call-filter=add_key keyctl request_key", "--console=passive",
                "-D", str(self.rootfs), *binds]
        self.proc = subprocess.Popen(argv, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + BOOT_TIMEOUT
        while not self.leader:
            self.leader = self._init_pid()
            if not self.leader:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"systemd-nspawn did not start: {self.log.read_text()[-2000:]}")
                time.sleep(0.1)
        state = ""
        while state not in ("running", "degraded"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the container's systemd did not come up ({state or 'no answer'}): "
                                   f"{self.run('systemctl', '--failed', '--no-pager', check=False).stdout}")
            time.sleep(0.5)
            state = self.run("systemctl", "is-system-running", check=False, timeout=10).stdout.strip()

    def _init_pid(self) -> int:
        """The container's PID 1 as the host sees it: the systemd below nspawn's own children."""
        pending = [self.proc.pid]
        while pending:
            pid = pending.pop()
            try:
                if pid != self.proc.pid and Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                    return pid
                pending += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            except (OSError, ValueError):
                continue
        return 0

    def run(self, *cmd: str, check: bool = True, timeout: float = 120, input: str | None = None):
        # A clean environment: the host's (certificate paths, a virtualenv) means nothing in there.
        res = subprocess.run(["nsenter", "-t", str(self.leader), "-a", "env", "-i", CONTAINER_PATH, "LANG=C.UTF-8",
                              *cmd], capture_output=True, text=True,
                             timeout=timeout, input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"in the container, {' '.join(cmd)} failed ({res.returncode}):\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        return res

    def poweroff(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.leader:
            os.kill(self.leader, signal.SIGRTMIN + 4)  # systemd: poweroff
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def ensure_rootfs() -> Path:
    for tool in ("systemd-nspawn", "mmdebstrap", "nsenter"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            pytest.fail(f"{tool} is missing: `make deps` installs systemd-container and mmdebstrap")
    res = subprocess.run([str(REPO / "deploy" / "nspawn-rootfs.sh"), str(CACHE)], capture_output=True, text=True,
                         timeout=ROOTFS_BUILD_TIMEOUT)
    if res.returncode != 0:
        pytest.fail(f"cannot build the test rootfs: {res.stdout[-2000:]}{res.stderr[-2000:]}")
    return CACHE / "rootfs"


KUBE_BENCH_BUILD = REPO / "deploy" / "build-kube-bench.sh"
KUBE_BENCH_BUILD_TIMEOUT = 1200
_background_build: subprocess.Popen | None = None


def pytest_collection_modifyitems(session, config, items):
    """kube-bench compiles for minutes on a fresh machine: start it, at the lowest CPU priority,
    when the session begins, so that it runs while the other tests mostly wait on containers.
    The test's fixture then finds it built, or waits for it (the script holds a lock)."""
    global _background_build
    if not any(i.path.parent == Path(__file__).parent for i in items):
        return
    if subprocess.run([str(KUBE_BENCH_BUILD)], env={**os.environ, "KUBE_BENCH_CHECK_ONLY": "1"},
                      capture_output=True).returncode == 0:
        return
    cache = Path(os.environ.get("PYKUBELET_CACHE", "/var/cache/pykubelet"))  # the build script's
    cache.mkdir(parents=True, exist_ok=True)
    log = open(cache / "build-kube-bench.log", "w")
    _background_build = subprocess.Popen(["nice", "-n", "19", "ionice", "-c", "3", str(KUBE_BENCH_BUILD)],
                                         stdout=log, stderr=log,
                                         start_new_session=True)


def pytest_sessionfinish(session, exitstatus):
    if _background_build is not None and _background_build.poll() is None:
        os.killpg(_background_build.pid, signal.SIGKILL)
        _background_build.wait(timeout=30)


def build_kube_bench() -> Path:
    res = subprocess.run([str(KUBE_BENCH_BUILD)], capture_output=True, text=True, timeout=KUBE_BENCH_BUILD_TIMEOUT)
    if res.returncode != 0:
        pytest.fail(f"cannot build kube-bench from the Go module proxy: {res.stderr[-3000:]}")
    return Path(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="package")
def kube_bench() -> Path:
    """kube-bench's directory (bin/kube-bench, cfg/), bound read-only into the machine."""
    return build_kube_bench()


@pytest.fixture(scope="package")
def machine(tmp_path_factory, kube_bench):
    if os.geteuid() != 0:
        pytest.fail("the systemd test boots a container and needs root")
    rootfs = ensure_rootfs()
    work = tmp_path_factory.mktemp("nspawn")
    (work / "state").mkdir()
    m = Machine(rootfs, work / "state", work / "nspawn.log", [kube_bench])
    try:
        m.boot()
        yield m
    finally:
        m.poweroff()
