"""The node of this package: cpuManagerPolicy static, CPU 0 reserved (reservedSystemCPUs) and kept
out of the shared pool too (strict-cpu-reservation), whole cores only (full-pcpus-only), and a
short cpuManagerReconcilePeriod so the shared pool's changes show within a test; the topology
manager's single-numa-node policy and the memory manager's Static one, which a single-NUMA host
(this one) runs.

Beside them, settings whose effect test_node_settings.py observes: logging as JSON, the kubelet
API without its debugging handlers (and x509 clients of the tests' CA), short periods of the
manifest directory's rescan (fileCheckFrequency) and of the full resync (syncFrequency), and a
short runtimeRequestTimeout, image pulls in parallel (serializeImagePulls false,
maxParallelImagePulls 2), three log rotations at once (containerLogMaxWorkers), and the node's
own OOM score and open-files limit (oomScoreAdj, maxOpenFiles), and CPU limits without a CFS
quota (cpuCFSQuota false), pods' bridge ports without hairpin (hairpinMode none), and an
evictionHard of memory alone that keeps the default thresholds
of the other signals (mergeDefaultEvictionSettings).

Its image filesystem is a filesystem of its own, small enough that a test can push it past image
GC's high threshold (imageGCHighThresholdPercent) with a file of a few megabytes: a tmpfs mounted
on the node's containerd directory before the node starts. Its images go once unused for
imageMaximumGCAge.

It traces every pod sync and runtime call (tracing, samplingRatePerMillion one million) to an OTLP
receiver on a unix socket (tests/integration/otlp_receiver.py), and runs its own processes in a
cgroup of their own (kubeletCgroups)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from shared.host.cpu_topology import numa_nodes
from tests.cluster.pki import PKI, CertPair
from tests.integration.conftest import Node, launch_node, pods, stop_node  # noqa: F401
from tests.integration.event_loops import assert_loops_never_blocked
from tests.integration.otlp_receiver import OtlpReceiver

RECONCILE_EVERY = 2  # seconds
FILE_CHECK_EVERY, SYNC_EVERY = 2, 3  # seconds; the kubelet's defaults are 20 s and 1 min
RUNTIME_TIMEOUT = 10  # runtimeRequestTimeout, seconds; the kubelet's default is 2 min
PARALLEL_PULLS = 2  # maxParallelImagePulls, with serializeImagePulls false
LOG_WORKERS = 3  # containerLogMaxWorkers; the kubelet's default is 1
# The image filesystem: 1% of it (2.6 MB) is less than one test image, so one percent between the
# thresholds still leaves image GC a goal that some unused images reach and all of them exceed.
IMAGEFS_MIB = 256
GC_LOW, GC_HIGH = 40, 41  # imageGCLowThresholdPercent, imageGCHighThresholdPercent
MAX_IMAGE_AGE = 20  # imageMaximumGCAge, seconds: image GC then runs every 5 s (a quarter of it)
# cgroupRoot: the node's pods are below /pykubelet-test-settings/kubepods, not /kubepods.
CGROUP_ROOT = "/pykubelet-test-settings"
# kubeletCgroups: where the node's own processes run (made by the node, removed after it).
KUBELET_CGROUPS = "/pykubelet-test-settings-agent"
# The node's own OOM score and open-files limit (the kubelet's defaults: -999, 1000000): a higher
# score and a lower limit, which a process may take without CAP_SYS_RESOURCE (root here has none).
OOM_SCORE_ADJ, MAX_OPEN_FILES = 100, 8192
HARD_MEMORY_MI = 150  # evictionHard memory.available (the default is 100Mi)
CGROUPS = Path("/sys/fs/cgroup")
CGROUP_ROOT_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer",
                           "hugetlb", "net_cls", "net_prio", "perf_event", "rdma", "systemd", "unified")


@dataclass
class SettingsNode:
    node: Node
    client: CertPair  # a client certificate the kubelet API accepts
    traces: OtlpReceiver  # where the node's spans go (tracing.endpoint)


@pytest.fixture(scope="package")
def settings_node(tmp_path_factory) -> Iterator[SettingsNode]:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("the CPU manager tests need 2 CPUs or more: one reserved, one to give out")
    if len(numa_nodes()) != 1:
        pytest.fail(f"the topology and memory manager tests need a single-NUMA host; this one has {len(numa_nodes())}")
    pki = PKI(tmp_path_factory.mktemp("cpu-manager-pki"))
    client = pki.issue("client", "settings-tester")
    root = tmp_path_factory.mktemp("cpu-manager-node")
    imagefs = root / "containerd"
    imagefs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={IMAGEFS_MIB}m,mode=0711", "pykubelet-test-imagefs",
                    str(imagefs)], check=True, timeout=30)
    traces = OtlpReceiver(tmp_path_factory.mktemp("otlp") / "otlp.sock")
    traces.start()
    try:
        _make_cgroup_root()
        n = _launch(root, pki, traces)
        try:
            yield SettingsNode(n, client, traces)
        finally:
            stop_node(n)
    finally:
        traces.stop()
        _unmount(root, imagefs)
        _remove_cgroup_root()
    assert_loops_never_blocked(n.root)


def _cgroup_root_dirs() -> list[Path]:
    return [CGROUPS / c / CGROUP_ROOT.strip("/") for c in CGROUP_ROOT_CONTROLLERS if (CGROUPS / c).is_dir()]


def _make_cgroup_root() -> None:
    """cgroupRoot exists before the node starts (the node checks it does). A new v1 cpuset cgroup
    has no CPUs or memory nodes: it gets its parent's, as the pods below it need them."""
    for d in _cgroup_root_dirs():
        d.mkdir(exist_ok=True)
        if d.parent.name == "cpuset":
            for name in ("cpuset.cpus", "cpuset.mems"):
                (d / name).write_text((d.parent / name).read_text())


def _remove_cgroup_root() -> None:
    """Deepest first: what the node left below (empty once its pods are gone), then the root;
    and kubeletCgroups, empty once the node's processes are gone."""
    for d in [CGROUPS / c / KUBELET_CGROUPS.strip("/") for c in CGROUP_ROOT_CONTROLLERS]:
        if d.is_dir():
            d.rmdir()
    for d in _cgroup_root_dirs():
        if d.is_dir():
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                sub.rmdir()
            d.rmdir()


def _unmount(root: Path, imagefs: Path) -> None:
    """The node's recursive bind of its root dir onto itself (for mount propagation) holds a copy
    of the tmpfs, so the node left that bind in place: both go, then the tmpfs beneath. Lazily,
    if the node's processes still hold something open there."""
    for target in (root, imagefs):
        if subprocess.run(["mountpoint", "-q", str(target)], timeout=30).returncode != 0:
            continue
        if subprocess.run(["umount", "--recursive", str(target)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "--recursive", "--lazy", str(target)], check=True, timeout=30)


def _launch(root, pki: PKI, traces: OtlpReceiver) -> Node:
    return launch_node(root,
                       # flags win over the config: these replace the integration node's periods
                       [f"--file-check-frequency={FILE_CHECK_EVERY}s", f"--sync-frequency={SYNC_EVERY}s"],
                       extra_config=f"cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"
                                    "cpuManagerPolicyOptions:\n  full-pcpus-only: \"true\"\n"
                                    "  strict-cpu-reservation: \"true\"\n"
                                    f"cpuManagerReconcilePeriod: {RECONCILE_EVERY}s\n"
                                    "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n"
                                    "topologyManagerPolicyOptions:\n  prefer-closest-numa-nodes: \"true\"\n"
                                    # evictionHard's memory.available, the node's only memory reservation; the
                                    # other signals keep their defaults (mergeDefaultEvictionSettings)
                                    f"evictionHard:\n  memory.available: {HARD_MEMORY_MI}Mi\n"
                                    "mergeDefaultEvictionSettings: true\n"
                                    "memoryManagerPolicy: Static\nreservedMemory:\n- numaNode: 0\n"
                                    f"  limits: {{memory: {HARD_MEMORY_MI}Mi}}\n"
                                    "logging:\n  format: json\nenableDebuggingHandlers: false\n"
                                    f"runtimeRequestTimeout: {RUNTIME_TIMEOUT}s\n"
                                    f"serializeImagePulls: false\nmaxParallelImagePulls: {PARALLEL_PULLS}\n"
                                    f"containerLogMaxWorkers: {LOG_WORKERS}\n"
                                    f"imageGCLowThresholdPercent: {GC_LOW}\nimageGCHighThresholdPercent: {GC_HIGH}\n"
                                    f"imageMinimumGCAge: 1s\nimageMaximumGCAge: {MAX_IMAGE_AGE}s\n"
                                    f"cgroupRoot: {CGROUP_ROOT}\nkubeletCgroups: {KUBELET_CGROUPS}\n"
                                    f"oomScoreAdj: {OOM_SCORE_ADJ}\nmaxOpenFiles: {MAX_OPEN_FILES}\n"
                                    "cpuCFSQuota: false\nhairpinMode: none\n"
                                    "authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: false\n"
                                    f"  x509:\n    clientCAFile: {pki.ca.cert}\n"
                                    "authorization:\n  mode: AlwaysAllow\n"
                                    f"tracing:\n  endpoint: {traces.endpoint}\n  samplingRatePerMillion: 1000000\n")


@pytest.fixture(scope="package")
def node(settings_node: SettingsNode) -> Node:
    return settings_node.node
