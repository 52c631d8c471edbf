"""Volumes on a real node: what containers see, what the node has mounted, and that nothing is
unmounted under a running pod or left behind by a removed one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shared.host.mounts import tmpfs_noswap_supported
from tests.integration.conftest import REPO, Node, wait_for

DRIVER = "dir.csi.pykubelet.test"


def _mounts_under(path: Path) -> dict[str, str]:
    """mount point -> 'mount id fstype' for mounts at or below path, from the host's view."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if parts[4] == str(path) or parts[4].startswith(f"{path}/"):
                found[parts[4]] = f"{parts[0]} {parts[parts.index('-') + 1]}"
    return found


def _calls(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _wait_admin_ready(node: Node, service: str) -> None:
    wait_for(lambda: node.admin_get(service, "/readyz", timeout=2).status_code == 200, 30,
             f"{service} to be ready")


@pytest.fixture
def csi_plugin(pods: Node, tmp_path: Path):
    """The directory-backed test CSI plugin, registered with the node through the registry dir."""
    log = tmp_path / "csi-calls.jsonl"
    backing = tmp_path / "backing"
    sock = tmp_path / "csi.sock"
    proc = subprocess.Popen([sys.executable, "-m", "tests.csi_plugin", "--name", DRIVER,
                             "--registry-dir", str(pods.root / "plugins_registry"), "--csi-socket", str(sock),
                             "--backing", str(backing), "--log", str(log)], cwd=REPO)
    try:
        wait_for(lambda: any(p["driver"] == DRIVER for p in
                             pods.admin_get("volume", "/plugins", timeout=2).json()),
                 30, "the CSI plugin to register")
        yield {"log": log, "backing": backing, "proc": proc}
    finally:
        if pods.proc.poll() is None:
            # Pods using the driver must be gone while it still runs, so they can be unpublished.
            for path in pods.written:
                path.unlink(missing_ok=True)
            wait_for(lambda: not pods.status()["pods"] and not list((pods.root / "pods").glob("*/volumes")), 90,
                     "pods using the CSI driver to be removed")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def test_local_volumes_as_containers_see_them(pods, tmp_path):
    host_dir = tmp_path / "created-by-node"
    host_file = tmp_path / "touched-by-node"
    ro_dir = tmp_path / "read-only"
    ro_dir.mkdir()
    (ro_dir / "fixed").write_text("fixed\n")
    bb = pods.image("busybox")
    pods.write_pod("vols", {
        "initContainers": [{"name": "init", "image": bb, "command": ["sh", "-c", "echo from-init > /shared/greeting"],
                            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
        "containers": [{"name": "app", "image": bb, "command": ["sleep", "3600"],
                        "resources": {"limits": {"memory": "64Mi"}},
                        "volumeMounts": [
                            {"name": "shared", "mountPath": "/shared"},
                            {"name": "shared", "mountPath": "/nested", "subPath": "sub/dir"},
                            {"name": "cache", "mountPath": "/cache"},
                            {"name": "host-dir", "mountPath": "/host-dir"},
                            {"name": "host-file", "mountPath": "/host-file"},
                            {"name": "ro", "mountPath": "/ro", "readOnly": True},
                            {"name": "info", "mountPath": "/etc/podinfo"}]}],
        "volumes": [
            {"name": "shared", "emptyDir": {"sizeLimit": "10Mi"}},
            {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
            {"name": "host-dir", "hostPath": {"path": str(host_dir), "type": "DirectoryOrCreate"}},
            {"name": "host-file", "hostPath": {"path": str(host_file), "type": "FileOrCreate"}},
            {"name": "ro", "hostPath": {"path": str(ro_dir), "type": "Directory"}},
            {"name": "info", "downwardAPI": {"defaultMode": 0o644, "items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o400},
                {"path": "mem_limit", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory",
                                                           "divisor": "1Mi"}}]}}],
    }, labels={"tier": "test", "app": "vols"})
    pod = pods.wait_running("vols")
    uid = pod["uid"]

    def run(cmd: str) -> str:
        code, out = pods.exec(uid, "app", ["sh", "-c", cmd])
        assert code == 0, f"{cmd!r} exited {code}: {out}"
        return out

    assert run("cat /shared/greeting") == "from-init\n", "the init container's emptyDir file reaches the app"
    cache_mount = run("grep ' /cache ' /proc/mounts")
    assert cache_mount.startswith("tmpfs /cache tmpfs") and "size=16384k" in cache_mount
    # Where the kernel's tmpfs takes it (6.4+), its pages never reach a swap device, as with the kubelet.
    assert ("noswap" in cache_mount.split()[3].split(",")) == tmpfs_noswap_supported(), cache_mount
    assert "tmpfs" not in run("grep ' /shared ' /proc/mounts").split()[2], "a disk emptyDir is not tmpfs"
    # subPath: created inside the volume, visible at both mount points.
    run("echo deep > /nested/f")
    assert run("cat /shared/sub/dir/f") == "deep\n"
    # hostPath: created by the node with the right type, shared with the host.
    assert host_dir.is_dir() and host_file.is_file()
    run("echo hello-host > /host-dir/out")
    assert (host_dir / "out").read_text() == "hello-host\n"
    assert run("cat /ro/fixed") == "fixed\n"
    code, out = pods.exec(uid, "app", ["sh", "-c", "echo x > /ro/new"])
    assert code != 0 and "Read-only file system" in out
    # downwardAPI: the kubelet's formats and modes, read-only, behind the ..data link.
    assert run("cat /etc/podinfo/labels") == 'app="vols"\ntier="test"'
    assert run("cat /etc/podinfo/name") == "vols-testnode"
    assert run("cat /etc/podinfo/mem_limit") == "64"
    assert run("stat -L -c %a /etc/podinfo/name") == "400\n"
    assert run("stat -L -c %a /etc/podinfo/labels") == "644\n"
    assert run("readlink /etc/podinfo/name") == "..data/name\n"
    assert run("readlink /etc/podinfo/..data").startswith("..")
    code, out = pods.exec(uid, "app", ["sh", "-c", "echo x > /etc/podinfo/new"])
    assert code != 0, "downwardAPI volumes are mounted read-only"

    vols = {v["name"]: v for v in pods.admin_get("volume", "/volumes", timeout=5).json()
            if v["podUID"] == uid}
    assert vols["cache"]["hostPath"] == str(pods.root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "cache")
    assert vols["cache"]["plugin"] == "kubernetes.io/empty-dir" and all(v["ready"] for v in vols.values())
    # What an emptyDir holds is measured for eviction (every volumeStatsAggPeriod, 2s here).
    run("dd if=/dev/zero of=/shared/blob bs=1024 count=2048 2>/dev/null")

    def shared_usage():
        v = next(v for v in pods.admin_get("volume", "/volumes", timeout=5).json()
                 if v["podUID"] == uid and v["name"] == "shared")
        return v if v["usedBytes"] >= 2 * 2**20 else None
    shared = wait_for(shared_usage, 20, "the emptyDir's usage to include the 2 MiB written")
    assert shared["sizeLimitBytes"] == 10 * 2**20 and shared["usedBytes"] < 3 * 2**20
    metrics = pods.admin_get("volume", "/metrics", timeout=5).text
    assert 'storage_operation_duration_seconds_count{operation_name="volume_mount",status="success",' \
           'volume_plugin="kubernetes.io/empty-dir"}' in metrics

    # Removing the pod unmounts its tmpfs and removes its directory; hostPath data stays.
    pod_dir = pods.root / "pods" / uid
    assert _mounts_under(pod_dir), "the memory-backed emptyDir is mounted on the host"
    pods.remove("vols.yaml")
    wait_for(lambda: not pod_dir.exists(), 60, "the pod directory to be removed")
    assert not _mounts_under(pod_dir)
    assert (host_dir / "out").exists()


def test_wrong_host_path_type_is_a_clear_mount_error(pods, tmp_path):
    not_a_dir = tmp_path / "plain-file"
    not_a_dir.write_text("x")
    bb = pods.image("busybox")
    pods.write_pod("good", {"containers": [{"name": "c", "image": bb, "command": ["sleep", "3600"]}]})
    pods.write_pod("badpath", {
        "containers": [{"name": "c", "image": bb, "command": ["sleep", "3600"],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "hostPath": {"path": str(not_a_dir), "type": "Directory"}}]})
    pods.write_pod("needs-api", {
        "containers": [{"name": "c", "image": bb, "command": ["sleep", "3600"],
                        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
        "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}]})
    pods.write_pod("nfs", {
        "containers": [{"name": "c", "image": bb, "command": ["sleep", "3600"],
                        "volumeMounts": [{"name": "share", "mountPath": "/share"}]}],
        "volumes": [{"name": "share", "nfs": {"server": "nas", "path": "/export"}}]})
    pods.wait_running("good")
    bad = pods.wait_pod("badpath", lambda p: "hostPath type check failed" in p["why"], 30,
                        "the hostPath type error in the pod's summary")
    assert bad["phase"] == "Pending"
    assert f"hostPath type check failed: {not_a_dir} is not a directory" in bad["why"]
    assert 'MountVolume.SetUp failed for volume "data"' in bad["why"]
    assert bad["containers"][0]["state"] == "waiting"
    assert not pods.containers_of(bad["uid"]) and not pods.sandboxes_of(bad["uid"]), \
        "nothing is started for a pod whose volumes are not ready"
    api = pods.wait_pod("needs-api", lambda p: "configmap" in p["why"], 30)
    assert "standalone mode" in api["why"] and "static pods may not use configMap volumes" in api["why"]
    nfs = pods.wait_pod("nfs", lambda p: "no volume plugin matched" in p["why"], 30)
    assert "pykubelet does not mount nfs volumes" in nfs["why"]
    assert pods.pod("good")["phase"] == "Running", "other pods are not affected"
    # Fixing the host makes the pod start without touching its manifest.
    not_a_dir.unlink()
    not_a_dir.mkdir()
    pods.wait_running("badpath")


def test_csi_inline_volume_publish_and_unpublish(pods, csi_plugin):
    calls = _calls(csi_plugin["log"])
    assert [c["method"] for c in calls[:3]] == ["GetInfo", "NodeGetInfo", "NotifyRegistrationStatus"]
    assert calls[2]["registered"] is True
    pods.write_pod("csi-inline", {
        "containers": [{"name": "c", "image": pods.image("busybox"),
                        "command": ["sh", "-c", "echo written-by-pod > /data/hello && sleep 3600"],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/data"}]}],
        "volumes": [{"name": "scratch", "csi": {"driver": DRIVER, "volumeAttributes": {"size": "small"}}}]})
    pod = pods.wait_running("csi-inline")
    uid = pod["uid"]
    target = pods.root / "pods" / uid / "volumes" / "kubernetes.io~csi" / "scratch" / "mount"
    publish = [c for c in _calls(csi_plugin["log"]) if c["method"] == "NodePublishVolume"]
    assert len(publish) == 1
    assert publish[0]["target_path"] == str(target)
    assert publish[0]["staging_target_path"] == "", "inline ephemeral volumes are not staged"
    assert publish[0]["capability"] == {"access_mode": "SINGLE_NODE_WRITER", "fs_type": "", "mount_flags": [],
                                        "kind": "mount"}
    assert publish[0]["volume_context"] == {"size": "small"}
    handle = publish[0]["volume_id"]
    assert handle.startswith("csi-")
    wait_for(lambda: (csi_plugin["backing"] / handle / "hello").exists(), 20, "the pod's write to reach the backing dir")
    assert (csi_plugin["backing"] / handle / "hello").read_text() == "written-by-pod\n"
    vol_data = json.loads((target.parent / "vol_data.json").read_text())
    assert vol_data["driverName"] == DRIVER and vol_data["volumeLifecycleMode"] == "Ephemeral"

    pods.remove("csi-inline.yaml")
    wait_for(lambda: any(c["method"] == "NodeUnpublishVolume" for c in _calls(csi_plugin["log"])), 60,
             "NodeUnpublishVolume")
    unpublish = [c for c in _calls(csi_plugin["log"]) if c["method"] == "NodeUnpublishVolume"]
    assert unpublish == [{"method": "NodeUnpublishVolume", "volume_id": handle, "target_path": str(target)}]
    assert not pods.containers_of(uid), "unpublished only after the pod's containers were gone"
    wait_for(lambda: not (pods.root / "pods" / uid).exists(), 30, "the pod directory to be removed")
    assert not any(c["method"] in ("NodeStageVolume", "NodeUnstageVolume") for c in _calls(csi_plugin["log"]))


def _volume_pod(pods: Node, name: str) -> dict:
    pods.write_pod(name, {
        "containers": [{"name": "c", "image": pods.image("busybox"),
                        "command": ["sh", "-c", "echo kept > /mem/file && sleep 3600"],
                        "volumeMounts": [{"name": "mem", "mountPath": "/mem"},
                                         {"name": "scratch", "mountPath": "/data"}]}],
        "volumes": [{"name": "mem", "emptyDir": {"medium": "Memory"}},
                    {"name": "scratch", "csi": {"driver": DRIVER}}]})
    return pods.wait_running(name)


def test_volume_service_restart_unmounts_nothing(pods, csi_plugin):
    pod = _volume_pod(pods, "survivor")
    uid = pod["uid"]
    pod_dir = pods.root / "pods" / uid
    mounts_before = _mounts_under(pod_dir)
    assert len(mounts_before) == 2, mounts_before
    containers_before = [c.id for c in pods.containers_of(uid)]
    calls_before = len(_calls(csi_plugin["log"]))

    old = pods.service_pid("volume")
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: pods.service_pid("volume") != old, 30, "the supervisor to restart the volume service")
    _wait_admin_ready(pods, "volume")
    wait_for(lambda: any(p["driver"] == DRIVER for p in pods.admin_get("volume", "/plugins", timeout=2).json()),
             30, "the driver to register with the new volume service")
    time.sleep(3)  # a few reconcile rounds of the new process

    assert _mounts_under(pod_dir) == mounts_before, "the same mounts (same mount ids) are still there"
    assert [c.id for c in pods.containers_of(uid)] == containers_before
    new_calls = [c["method"] for c in _calls(csi_plugin["log"])[calls_before:]]
    assert "NodeUnpublishVolume" not in new_calls and "NodePublishVolume" not in new_calls, new_calls
    assert pods.exec(uid, "c", ["cat", "/mem/file"]) == (0, "kept\n")
    vols = [v for v in pods.admin_get("volume", "/volumes", timeout=5).json() if v["podUID"] == uid]
    assert len(vols) == 2 and all(v["ready"] for v in vols)


def test_pod_deleted_while_volume_service_is_down_is_cleaned_up(pods, csi_plugin):
    pod = _volume_pod(pods, "orphan")
    uid = pod["uid"]
    pod_dir = pods.root / "pods" / uid
    assert len(_mounts_under(pod_dir)) == 2
    volume_pid = pods.service_pid("volume")
    os.kill(volume_pid, signal.SIGSTOP)  # down: it handles nothing until it is replaced below
    try:
        pods.remove("orphan.yaml")
        wait_for(lambda: pods.pod("orphan") is None and not pods.containers_of(uid), 60,
                 "pod-sync to remove the pod's containers")
        assert len(_mounts_under(pod_dir)) == 2, "nothing unmounted it while the volume service was down"
    finally:
        os.kill(volume_pid, signal.SIGKILL)
    wait_for(lambda: pods.service_pid("volume") != volume_pid, 30, "the supervisor to restart the volume service")
    wait_for(lambda: not pod_dir.exists(), 60, "the restarted volume service to clean up the orphaned pod's volumes")
    assert not _mounts_under(pod_dir)
    unpublish = [c for c in _calls(csi_plugin["log"]) if c["method"] == "NodeUnpublishVolume"]
    assert [c["target_path"] for c in unpublish] == [str(pod_dir / "volumes" / "kubernetes.io~csi" / "scratch" / "mount")]


def test_image_volume_on_the_nodes_containerd(pods):
    """An image volume is mounted by the runtime: containerd 2.2 and newer mounts the image (and
    its subPath) read-only; an older one cannot, and the container is refused with a reason that
    names the runtime's version, while the pod's other containers and other pods run."""
    bb = pods.image("busybox")
    version = pods.runtime(lambda cri: cri.version())
    assert version.runtime_name == "containerd", version
    pods.write_pod("other", {"containers": [{"name": "c", "image": bb, "command": ["sleep", "3600"]}]})
    pods.write_pod("imgvol", {
        "containers": [
            {"name": "mounts", "image": bb, "command": ["sleep", "3600"],
             "volumeMounts": [{"name": "img", "mountPath": "/volume"},
                              {"name": "img", "mountPath": "/bin-only", "subPath": "bin"}]},
            {"name": "plain", "image": bb, "command": ["sleep", "3600"]}],
        "volumes": [{"name": "img", "image": {"reference": bb, "pullPolicy": "IfNotPresent"}}]})
    pods.wait_running("other")
    major, minor = (int(x) for x in version.runtime_version.lstrip("v").split(".")[:2])
    if (major, minor) >= (2, 2):
        pod = pods.wait_running("imgvol")
        assert pods.exec(pod["uid"], "mounts", ["ls", "/volume/bin/busybox", "/bin-only/busybox"])[0] == 0
        code, out = pods.exec(pod["uid"], "mounts", ["touch", "/volume/x"])
        assert code != 0 and "Read-only file system" in out
        return
    pod = pods.wait_pod("imgvol", lambda p: "containerd 2.2 or newer" in p["why"], 60,
                        "the image volume's refusal in the pod's summary")
    assert f"this node runs containerd {version.runtime_version}" in pod["why"]
    states = {c["name"]: c for c in pod["containers"]}
    assert states["mounts"]["state"] == "waiting"
    assert states["mounts"]["reason"] == "CreateContainerConfigError", states["mounts"]
    pods.wait_pod("imgvol", lambda p: any(c["name"] == "plain" and c["state"] == "running"
                                          for c in p["containers"]), 60, "the container without the volume to run")
    assert pods.pod("other")["phase"] == "Running"
