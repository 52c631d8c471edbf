"""docker-compose.yml for real: a dockerd of the test's own (no iptables, no bridge: every
container is on the host network), the image built without an image hub (`make compose-images`),
then compose up -> the web pod answers at its pod IP; restarting a service's container keeps the
pod's container; compose down -> no pod, mount, bridge or CNI rule is left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from shared.host.cni import BRIDGE
from shared.host.mounts import mounts_under, unmount_all_under
from tests.deploy.conftest import REPO
from tests.integration.conftest import stop_process, wait_for

CACHE = Path(os.environ.get("PYKUBELET_CACHE_DIR", "/var/cache/pykubelet")) / "docker"
PROJECT = "pykubelet-test"
DOCKERD_TIMEOUT = 60
BUILD_TIMEOUT = 900
UP_TIMEOUT = 300


def _run(argv: list[str], env: dict, timeout: float, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


@pytest.fixture(scope="module")
def docker(tmp_path_factory):
    for tool in ("dockerd", "docker", "docker-compose"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: `make deps` installs docker.io and docker-compose")
    run_dir = tmp_path_factory.mktemp("dockerd")
    sock = run_dir / "docker.sock"
    CACHE.mkdir(parents=True, exist_ok=True)
    # Its own socket and exec root beside any dockerd the host runs; images cached across runs.
    # --iptables=false --bridge=none: it never touches the host's firewall (a dockerd that does
    # sets FORWARD to DROP and cuts pods off their bridge).
    proc = subprocess.Popen(["dockerd", f"--host=unix://{sock}", f"--data-root={CACHE}",
                             f"--exec-root={run_dir / 'exec'}", f"--pidfile={run_dir / 'dockerd.pid'}",
                             "--iptables=false", "--ip-forward=false", "--bridge=none"],
                            stdout=open(run_dir / "dockerd.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    env = {**os.environ, "DOCKER_HOST": f"unix://{sock}"}
    try:
        deadline = time.monotonic() + DOCKERD_TIMEOUT
        while _run(["docker", "version"], env, 10, check=False).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dockerd did not start: {(run_dir / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield env
    finally:
        stop_process(proc)
        # dockerd leaves its own netns bind-mounted in its exec root.
        assert unmount_all_under(run_dir) == [], "could not unmount what dockerd left"


@pytest.fixture(scope="module")
def compose(docker, tmp_path_factory):
    _run(["make", "compose-images"], docker, BUILD_TIMEOUT)
    root = tmp_path_factory.mktemp("compose-root")
    env = {**docker, "PYKUBELET_ROOT_DIR": str(root)}
    cmd = ["docker-compose", "-p", PROJECT, "-f", str(REPO / "docker-compose.yml")]
    try:
        yield cmd, env, root
    finally:
        _run([*cmd, "down", "--remove-orphans", "--timeout", "120"], env, 300, check=False)
        subprocess.run(["umount", "-l", str(root)], capture_output=True, timeout=30)


def _status(root: Path) -> dict:
    res = subprocess.run([str(REPO / ".venv" / "bin" / "pykubelet"), "status", "--root-dir", str(root), "-o", "json"],
                         capture_output=True, text=True, timeout=60)
    return json.loads(res.stdout) if res.returncode in (0, 3, 4) else {"pods": []}


def _web(root: Path) -> dict | None:
    pod = next((p for p in _status(root)["pods"] if p["name"].startswith("web-")), None)
    if pod and pod["phase"] == "Running" and pod["podIP"] and pod["containers"][0]["state"] == "running":
        return pod
    return None


def _cni_rules() -> list[str]:
    rules = []
    for save in ("iptables-legacy-save", "iptables-nft-save"):
        if shutil.which(save):
            out = subprocess.run([save], capture_output=True, text=True, timeout=30).stdout
            rules += [line for line in out.splitlines() if "CNI-" in line]
    return rules


def test_compose_runs_a_node_and_leaves_nothing_behind(compose):
    cmd, env, root = compose
    rules_before, shims_before, logs_before = _cni_rules(), _shims(), _pod_logs()
    _run([*cmd, "up", "-d"], env, UP_TIMEOUT)
    pod = wait_for(lambda: _web(root), 180, "the web pod Running")
    assert "pykubelet" in httpx.get(f"http://{pod['podIP']}/", timeout=5).text

    container_id = pod["containers"][0]["containerID"]
    _run([*cmd, "restart", "pod-sync"], env, 120)
    wait_for(lambda: "healthy" in _run(["docker", "inspect", "-f", "{{.State.Health.Status}}",
                                        f"{PROJECT}_pod-sync_1"], env, 30).stdout, 90, "pod-sync healthy again")
    after = wait_for(lambda: _web(root), 60, "the web pod Running after the restart")
    assert after["containers"][0]["containerID"] == container_id, "the same container, not a new one"

    _run([*cmd, "down", "--timeout", "120"], env, 300)
    assert _run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                env, 30).stdout.strip() == ""
    assert mounts_under(root) == [], f"mounts left: {mounts_under(root)}"
    assert subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode != 0, "bridge left"
    assert _cni_rules() == rules_before, "CNI NAT rules left"
    assert _shims() == shims_before, "container shims left running"
    # Only what this node added counts: a directory another agent left there is not ours to keep.
    assert _pod_logs() - logs_before == set(), "pod log directories left"


def _pod_logs() -> set[str]:
    logs = Path("/var/log/pods")
    return set(os.listdir(logs)) if logs.exists() else set()


def _shims() -> set[str]:
    """Shims of CRI pods (containerd's k8s.io namespace), not of docker's own containers."""
    return set(subprocess.run(["pgrep", "-f", "containerd-shim.*-namespace k8s.io"], capture_output=True,
                              text=True).stdout.split())
