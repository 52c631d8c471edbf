"""File modes on a node whose root dir an older pykubelet left readable by others: after the
start, the root dir is 0700, the service logs and the state store (its WAL and SHM too) 0600,
the log says what was corrected, and a local user (nobody) can read none of it. What containers
must read keeps the kubelet's modes: a pod running as nobody still reads its /etc/hosts,
resolv.conf and volumes and writes its emptyDir and termination message."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.security_modes.conftest import OLD_LOGS

NOBODY = 65534

# Files and directories under the root dir that others may read, and why each must be so.
# Every one of them sits below the root dir (0700): no local user reaches them by path, only
# containers through bind mounts.
MAY_BE_READABLE = {
    # The test harness's own files (launch_node), not pykubelet's.
    "kubelet-config.yaml": "the tests' config file",
    "up.log": "the tests' capture of `pykubelet up`'s output",
    "manifests": "the static pod directory the tests write",
    # containerd's own layout: image content and snapshots keep the images' modes (a container
    # user runs the image's binaries), and the sandbox files it makes for containers
    # (resolv.conf, hostname, hosts) are 0644 so any container user reads them.
    "containerd": "containerd's root and state (images, snapshots, sandbox files)",
    # The kubelet's container log layout (/var/log/pods): directories 0755, files 0640.
    "pod-logs": "container log directories, as the kubelet's /var/log/pods",
    # Image blobs the registry serves to anyone on 127.0.0.1 anyway.
    "registry": "the local registry's image storage",
    # host-local IPAM's reservations (a container id per address), written 0644 by the CNI
    # plugin containerd runs; the directories above them are 0750.
    "cni/ipam/pykubelet": "the CNI plugin's address reservations",
}
# Under <root>/pods/<uid>/: what the pod's containers get through bind mounts.
POD_FILES_MAY_BE_READABLE = {
    "etc-hosts": "the container's /etc/hosts (0644: any container user resolves names)",
    "containers": "termination-message files (0666: any container user writes its message)",
    "volumes": "volume contents (the kubelet's modes: emptyDir 0777, projected files per defaultMode)",
}


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _as_nobody(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True,
                          text=True, timeout=30)


def _listed(rel: Path) -> bool:
    return any(rel == Path(entry) or Path(entry) in rel.parents for entry in MAY_BE_READABLE)


def _readable_by_others(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel = here.relative_to(root)
        if rel.parts and _listed(rel):
            dirnames[:] = []
            continue
        if len(rel.parts) >= 2 and rel.parts[0] == "pods":
            if len(rel.parts) >= 3 and rel.parts[2] in POD_FILES_MAY_BE_READABLE:
                dirnames[:] = []
                continue
        for name in [*dirnames, *filenames]:
            p = here / name
            if p.is_symlink() or _listed(p.relative_to(root)):
                continue
            if len(p.relative_to(root).parts) == 3 and p.parts[-3] == "pods" and name in POD_FILES_MAY_BE_READABLE:
                continue
            if _mode(p) & 0o004:
                out.append(f"{p.relative_to(root)} {_mode(p):04o}")
    return out


def test_the_root_dir_logs_and_store_are_private_and_what_was_not_is_corrected_with_a_log_line(pods):
    root = pods.root
    # Others may pass through (a user-namespaced pod's root, to its rootfs below containerd's
    # dir), never list or read it.
    assert _mode(root) == 0o711, f"the root dir is {_mode(root):04o}"
    assert _mode(root / "containerd") == 0o711
    logs = root / "logs"
    assert _mode(logs) == 0o700
    log_modes = {p.name: _mode(p) for p in logs.iterdir() if p.is_file()}
    assert {"pod-sync.log", "containerd.log", "node-api.log"} <= set(log_modes), log_modes
    assert {n: m for n, m in log_modes.items() if m != 0o600} == {}, "every log is 0600"
    store = {p.name: _mode(p) for p in root.iterdir() if p.name.startswith("state.db")}
    assert "state.db" in store and "state.db-wal" in store and "state.db-shm" in store, store
    assert {n: m for n, m in store.items() if m != 0o600} == {}, "the store and its WAL and SHM are 0600"

    up_log = pods.log.read_text()
    for what in [f"the root dir {root} had mode 0755", f"{logs / OLD_LOGS[0]} had mode 0644",
                 f"{root / 'state.db'} had mode 0644", f"{root / 'state.db-wal'} had mode 0644",
                 f"{root / 'state.db-shm'} had mode 0644"]:
        assert what in up_log, f"the log does not say: {what}"
    assert f"the root dir {root} had mode 0755 (readable by other users); corrected to 0711" in up_log
    assert "corrected to 0600" in up_log

    assert _readable_by_others(root) == [], "readable by other users beside those listed in MAY_BE_READABLE"
    for target in (root / "state.db", root / "state.db-wal", logs / "pod-sync.log", root / "bus"):
        res = _as_nobody("cat", str(target))
        assert res.returncode != 0 and "Permission denied" in res.stderr, f"nobody read {target}: {res}"
    for listed in (root, root / "containerd"):
        res = _as_nobody("ls", str(listed))
        assert res.returncode != 0 and "Permission denied" in res.stderr, f"nobody listed {listed}: {res}"


def test_a_pod_running_as_nobody_still_reads_and_writes_what_it_is_given(pods, tmp_path):
    host_dir = tmp_path / "made-for-the-pod" / "data"
    script = ("cat /etc/hosts /etc/resolv.conf /etc/hostname /podinfo/a/b/labels > /dev/null && "
              "touch /cache/written && echo done > /dev/termination-log; sleep 3600")
    pods.write_pod("as-nobody", {
        "securityContext": {"runAsUser": NOBODY, "runAsGroup": NOBODY},
        "volumes": [{"name": "cache", "emptyDir": {}},
                    {"name": "podinfo", "downwardAPI": {"items": [
                        {"path": "a/b/labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                    {"name": "host", "hostPath": {"path": str(host_dir), "type": "DirectoryOrCreate"}}],
        "containers": [{"name": "app", "image": pods.image("busybox"), "command": ["sh", "-c", script],
                        "volumeMounts": [{"name": "cache", "mountPath": "/cache"},
                                         {"name": "podinfo", "mountPath": "/podinfo"},
                                         {"name": "host", "mountPath": "/host"}]}]}, labels={"app": "x"})
    pod = pods.wait_running("as-nobody", 90)
    code, out = pods.exec(pod["uid"], "app", ["sh", "-c", "id -u; ls /cache/written /host && "
                                                         "cat /dev/termination-log /podinfo/a/b/labels"])
    assert code == 0 and out.startswith(f"{NOBODY}\n") and "done" in out and 'app="x"' in out, out
    # As the kubelet makes them (umask 022): a hostPath it creates is 0755, parents too.
    assert _mode(host_dir) == 0o755 and _mode(host_dir.parent) == 0o755
    # With a pod running (its etc-hosts, termination-message file, volumes, IP reservation):
    # still nothing readable by others beside what is listed.
    assert _readable_by_others(pods.root) == []


def test_enable_server_false_runs_the_node_without_the_kubelet_api(pods):
    """This package's node has enableServer: false (conftest.py): every service runs, and nothing
    listens on the kubelet API's port."""
    import socket

    assert pods.status()["node"]["running"], pods.status()["node"]
    with socket.socket() as s:
        s.settimeout(5)
        assert s.connect_ex(("127.0.0.1", pods.kubelet_port)) != 0, "the kubelet API port answered"
