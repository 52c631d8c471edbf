"""Eviction under real pressure: a cluster node (real etcd + kube-apiserver) whose root dir is a
small ext4 filesystem on a loop device made for the test, with thresholds set from what this
machine has free right now, so a pod can cross them on purpose. The kernel signals the crossing
of the memory threshold (kernelMemcgNotification)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from services.eviction.signals import SignalReader
from shared.store import Store
from tests.cluster.conftest import Cluster, started_control_plane
from tests.integration.conftest import launch_node, require_node_prerequisites, stop_node, wait_for

MIB, GIB = 2**20, 2**30
FS_SIZE = 2 * GIB
DISK_THRESHOLD_MIB = 600
# The memory threshold sits this far below what is available when the node starts: room for the
# node itself, and a hog that must allocate about that much to cross it.
MEMORY_MARGIN = 3 * GIB
TRANSITION_SECONDS = 5
# After a memory eviction the node evicts on until memory.available is this far above the
# threshold (evictionMinimumReclaim): less than the margin, so an idle node is above it.
MEMORY_MIN_RECLAIM = int(1.5 * GIB)
# A soft threshold on pid.available this many threads below what the host has free before the node
# starts (the node and the other tests' pods take a few hundred), acted on after SOFT_GRACE seconds,
# giving a pod at most MAX_POD_GRACE seconds.
PID_MARGIN, SOFT_GRACE, MAX_POD_GRACE = 1200, 5, 3


def memory_available() -> int:
    """memory.available as the eviction service computes it (capacity - root working set)."""
    return SignalReader(Path("/"), 0).memory()["memory.available"].available


def pids_available() -> int:
    """pid.available as the eviction service computes it (pid_max - the threads there are)."""
    return SignalReader(Path("/"), 0).pids()["pid.available"].available


def _run(*argv: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")


@pytest.fixture(scope="package")
def small_fs(tmp_path_factory):
    base = tmp_path_factory.mktemp("eviction-fs")
    image, mnt = base / "nodefs.img", base / "root"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(FS_SIZE)
    try:
        _run("mkfs.ext4", "-q", "-F", str(image))
        _run("mount", "-o", "loop", str(image), str(mnt))
    except (RuntimeError, FileNotFoundError) as exc:
        pytest.fail(f"cannot make the small filesystem the disk-pressure tests need (loop device, "
                    f"mkfs.ext4 from e2fsprogs): {exc}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-R", str(mnt)], capture_output=True, timeout=60)
        if subprocess.run(["mountpoint", "-q", str(mnt)], timeout=10).returncode == 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=60)
        image.unlink(missing_ok=True)


class PressureCluster(Cluster):
    memory_threshold: int = 0
    pid_soft_threshold: int = 0

    def condition(self, ctype: str) -> dict:
        return next(c for c in self.node_obj()["status"]["conditions"] if c["type"] == ctype)

    def eviction_view(self) -> dict:
        return self.node.admin_get("eviction", "/eviction", timeout=10).json()

    def signal(self, name: str) -> dict:
        return next(s for s in self.eviction_view()["signals"] if s["signal"] == name)

    def store(self) -> Store:
        return Store(self.node.root / "state.db", writer=None)

    def events_of(self, name: str) -> list[dict]:
        return self.get("events", "--field-selector", f"involvedObject.name={name}")["items"]

    def delete_pods(self, *names: str) -> None:
        self.kubectl("delete", "pod", *names, "--wait=false", "--ignore-not-found")
        wait_for(lambda: not any(self.pod(n) for n in names), 90, f"pods {', '.join(names)} to be deleted")


@pytest.fixture(scope="package")
def pressure_cluster(tmp_path_factory, small_fs):
    require_node_prerequisites()
    with started_control_plane(tmp_path_factory.mktemp("eviction-control-plane"), "testnode") as cp:
        # What is available once the control plane runs: the thresholds sit just below it.
        threshold, pid_threshold = memory_available() - MEMORY_MARGIN, pids_available() - PID_MARGIN
        config = (f"evictionHard:\n  memory.available: {threshold // MIB}Mi\n"
                  f"  nodefs.available: {DISK_THRESHOLD_MIB}Mi\n"
                  f"evictionMinimumReclaim:\n  memory.available: {MEMORY_MIN_RECLAIM // MIB}Mi\n"
                  f"evictionSoft:\n  pid.available: \"{pid_threshold}\"\n"
                  f"evictionSoftGracePeriod:\n  pid.available: {SOFT_GRACE}s\n"
                  f"evictionMaxPodGracePeriod: {MAX_POD_GRACE}\n"
                  f"evictionPressureTransitionPeriod: {TRANSITION_SECONDS}s\n"
                  "imageMinimumGCAge: 1s\n"  # 0s would be the default 2m, as in the kubelet
                  "kernelMemcgNotification: true\n")
        node = None
        try:
            node = launch_node(small_fs, ["--kubeconfig", str(cp.node_kubeconfig)], extra_config=config)
            c = PressureCluster(cp, node)
            c.memory_threshold = (threshold // MIB) * MIB
            c.pid_soft_threshold = pid_threshold
            wait_for(lambda: c.ready() == "True", 60, "the node to register and turn Ready")
            yield c
        finally:
            if node is not None:
                stop_node(node)


def pod_json(cluster, name: str) -> str:
    return json.dumps(cluster.pod(name), indent=1)[:3000]
