"""Volume building blocks: the atomic writer, payloads, hostPath types, token refresh."""

from __future__ import annotations

import base64
import os
import re
import socket

import pytest

from services.volume.api_objects import _Token, token_needs_refresh
from services.volume.atomic_writer import FileProjection, PayloadError, write_atomically
from services.volume.csi_volumes import CSIVolumes, attachment_name, ephemeral_handle
from services.volume.fake_objects import FakeObjectSource
from services.volume.local import memory_size, setup_host_path
from services.volume.objects import STANDALONE_OBJECTS, STATIC_POD_OBJECTS
from services.volume.paths import Layout
from services.volume.projection import NodeAllocatable, VolumeSourceError, build_payload
from services.volume.registry import PluginRegistry
from services.volume.setup import referenced_objects
from shared.csi import registration
from shared.model.podspec import validate_pod

NODE = NodeAllocatable(cpu_millicores=2000, memory_bytes=4 * 2**30)


def pod(volumes=None, mounts=None, limits=None, **meta):
    c = {"name": "app", "image": "x", "volumeMounts": mounts or []}
    if limits:
        c["resources"] = {"limits": limits}
    return validate_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u1", **meta},
                         "spec": {"containers": [c], "volumes": volumes or [], "serviceAccountName": "sa"}})


# -- atomic writer ----------------------------------------------------------------------------


def test_atomic_writer_swaps_versions_through_data_link(tmp_path):
    assert write_atomically(tmp_path, {"a": FileProjection(b"1", 0o644), "dir/b": FileProjection(b"2", 0o400)})
    first = os.readlink(tmp_path / "..data")
    assert first.startswith("..20") and (tmp_path / first).is_dir()
    assert os.readlink(tmp_path / "a") == "..data/a" and os.readlink(tmp_path / "dir") == "..data/dir"
    assert (tmp_path / "dir" / "b").read_bytes() == b"2"
    assert (tmp_path / "dir" / "b").stat().st_mode & 0o777 == 0o400

    assert not write_atomically(tmp_path, {"a": FileProjection(b"1", 0o644), "dir/b": FileProjection(b"2", 0o400)}), \
        "an unchanged payload writes nothing"
    assert os.readlink(tmp_path / "..data") == first

    assert write_atomically(tmp_path, {"a": FileProjection(b"new", 0o644)})
    second = os.readlink(tmp_path / "..data")
    assert second != first and not (tmp_path / first).exists(), "the old version is removed after the swap"
    assert (tmp_path / "a").read_bytes() == b"new"
    assert not (tmp_path / "dir").exists() and not (tmp_path / "dir").is_symlink(), "a dropped key's link goes"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["..data", second, "a"])


def test_atomic_writer_never_follows_waits_on_or_removes_what_it_did_not_write(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a").write_bytes(b"1")
    os.chmod(outside / "a", 0o644)
    vol = tmp_path / "vol"
    vol.mkdir()
    # ..data pointing out of the volume, at files equal to the payload: not taken as the
    # current version, and never removed as the old one.
    (vol / "..data").symlink_to(outside)
    assert write_atomically(vol, {"a": FileProjection(b"1", 0o644)})
    assert (outside / "a").read_bytes() == b"1", "the directory ..data pointed at is left alone"
    version = vol / os.readlink(vol / "..data")
    # A FIFO or a symlink where a file of the current version was: replaced, not opened.
    (version / "a").unlink()
    os.mkfifo(version / "a", 0o644)
    assert write_atomically(vol, {"a": FileProjection(b"1", 0o644)}), "a FIFO is not the payload"
    version = vol / os.readlink(vol / "..data")
    (version / "a").unlink()
    (version / "a").symlink_to(outside / "a")
    assert write_atomically(vol, {"a": FileProjection(b"1", 0o644)}), "a symlink is not the payload"
    assert (vol / "a").read_bytes() == b"1" and not (vol / os.readlink(vol / "..data") / "a").is_symlink()


@pytest.mark.parametrize("bad", ["../x", "/abs", "..data", "a/../../b", ""])
def test_atomic_writer_rejects_paths_outside(tmp_path, bad):
    with pytest.raises(PayloadError):
        write_atomically(tmp_path, {bad: FileProjection(b"", 0o644)})


# -- payloads ---------------------------------------------------------------------------------


async def test_config_map_all_keys_items_and_modes():
    objects = FakeObjectSource()
    objects.config_maps[("ns", "cfg")] = {"data": {"a": "1", "b": "2"},
                                         "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()}}
    p = pod()
    all_keys = await build_payload("configMap", {"name": "cfg"}, p, objects, NODE)
    assert all_keys == {"a": FileProjection(b"1", 0o644), "b": FileProjection(b"2", 0o644),
                        "bin": FileProjection(b"\x00\x01", 0o644)}
    some = await build_payload("configMap", {"name": "cfg", "defaultMode": 0o600,
                                             "items": [{"key": "a", "path": "x/a.conf", "mode": 0o400},
                                                       {"key": "b", "path": "b"}]}, p, objects, NODE)
    assert some == {"x/a.conf": FileProjection(b"1", 0o400), "b": FileProjection(b"2", 0o600)}
    with pytest.raises(VolumeSourceError, match='configuration key "nope" not found'):
        await build_payload("configMap", {"name": "cfg", "items": [{"key": "nope", "path": "n"}]}, p, objects, NODE)
    with pytest.raises(VolumeSourceError, match='configmap "missing" not found'):
        await build_payload("configMap", {"name": "missing"}, p, objects, NODE)
    assert await build_payload("configMap", {"name": "missing", "optional": True}, p, objects, NODE) == {}


async def test_secret_projected_and_token():
    objects = FakeObjectSource()
    objects.secrets[("ns", "s")] = {"data": {"password": base64.b64encode(b"hunter2").decode()}}
    objects.config_maps[("ns", "cfg")] = {"data": {"a": "1"}}
    p = pod(labels={"k": "v"})
    assert await build_payload("secret", {"secretName": "s"}, p, objects, NODE) == \
        {"password": FileProjection(b"hunter2", 0o644)}
    projected = await build_payload("projected", {"defaultMode": 0o440, "sources": [
        {"configMap": {"name": "cfg"}}, {"secret": {"name": "s"}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"serviceAccountToken": {"audience": "vault", "expirationSeconds": 7200, "path": "token"}}]}, p, objects, NODE)
    assert projected == {"a": FileProjection(b"1", 0o440), "password": FileProjection(b"hunter2", 0o440),
                         "labels": FileProjection(b'k="v"', 0o440), "token": FileProjection(b"token-for-sa-1", 0o440)}
    assert objects.token_requests == [("u1", "vault", 7200)]
    with pytest.raises(VolumeSourceError, match="at least 600"):
        await build_payload("projected", {"sources": [{"serviceAccountToken": {"expirationSeconds": 60}}]},
                            p, objects, NODE)


def _with_users(pod_user=None, container_users=(None,), fs_group=None):
    psc = {k: v for k, v in (("runAsUser", pod_user), ("fsGroup", fs_group)) if v is not None}
    containers = [{"name": f"c{i}", "image": "x", **({"securityContext": {"runAsUser": u}} if u is not None else {})}
                  for i, u in enumerate(container_users)]
    return validate_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                         "spec": {"containers": containers, "securityContext": psc}})


@pytest.mark.parametrize("pod_user,container_users,fs_group,file", [
    (None, (None,), None, FileProjection(b"token-for-default-1", 0o644)),
    (1000, (None, None), None, FileProjection(b"token-for-default-1", 0o600, 1000)),  # one user: it owns the token
    (None, (1000, 1000), None, FileProjection(b"token-for-default-1", 0o600, 1000)),
    (1000, (None, 2000), None, FileProjection(b"token-for-default-1", 0o644)),  # two users: as the volume says
    (None, (2000, None), None, FileProjection(b"token-for-default-1", 0o644)),  # one runs as the image says
    (None, (None,), 3000, FileProjection(b"token-for-default-1", 0o600)),  # the group is given read after
])
async def test_a_token_is_private_to_the_pods_one_user_or_its_fs_group(pod_user, container_users, fs_group, file):
    files = await build_payload("projected", {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                                _with_users(pod_user, container_users, fs_group), FakeObjectSource(), NODE)
    assert files == {"token": file}


def test_a_file_for_a_user_is_written_as_theirs(tmp_path):
    assert write_atomically(tmp_path, {"token": FileProjection(b"t", 0o600, 1234)})
    st = (tmp_path / "token").stat()
    assert (st.st_uid, st.st_mode & 0o777) == (1234, 0o600)
    assert not write_atomically(tmp_path, {"token": FileProjection(b"t", 0o600, 1234)})
    assert write_atomically(tmp_path, {"token": FileProjection(b"t", 0o600, 4321)}), "another owner is a change"
    assert (tmp_path / "token").stat().st_uid == 4321


async def test_downward_api_values_and_errors():
    p = pod(limits={"memory": "128Mi"}, annotations={"z": "1", "a": "2"})
    files = await build_payload("downwardAPI", {"items": [
        {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}},
        {"path": "ann", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Mi"}},
        {"path": "cpu", "resourceFieldRef": {"containerName": "app", "resource": "limits.cpu"}}]},
        p, FakeObjectSource(), NODE)
    assert {k: v.data for k, v in files.items()} == {"ns": b"ns", "ann": b'a="2"\nz="1"', "mem": b"128", "cpu": b"2"}
    with pytest.raises(VolumeSourceError, match="status.podIP"):
        await build_payload("downwardAPI", {"items": [{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}]},
                            p, FakeObjectSource(), NODE)


async def test_static_pods_may_not_read_api_objects():
    with pytest.raises(VolumeSourceError, match=r'static pods may not use secret volumes \(secret "s"\) '
                                                r"\(pykubelet runs in standalone mode"):
        await build_payload("secret", {"secretName": "s"}, pod(), STANDALONE_OBJECTS, NODE)
    with pytest.raises(VolumeSourceError, match=r"static pods may not use service account tokens$"):
        await build_payload("projected", {"sources": [{"serviceAccountToken": {"path": "t"}}]}, pod(),
                            STATIC_POD_OBJECTS, NODE)


def test_referenced_objects():
    p = pod(volumes=[{"name": "a", "configMap": {"name": "c1"}}, {"name": "b", "secret": {"secretName": "s1"}},
                     {"name": "c", "projected": {"sources": [{"configMap": {"name": "c2"}},
                                                             {"secret": {"name": "s2"}}]}},
                     {"name": "d", "emptyDir": {}}])
    assert referenced_objects(p) == {("configmap", "ns", "c1"), ("configmap", "ns", "c2"),
                                     ("secret", "ns", "s1"), ("secret", "ns", "s2")}


# -- local volumes ----------------------------------------------------------------------------


def test_host_path_types(tmp_path):
    d, f = tmp_path / "d", tmp_path / "f"
    d.mkdir()
    f.write_text("x")
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        assert setup_host_path({"path": str(d), "type": "Directory"}) == d
        assert setup_host_path({"path": str(f), "type": "File"}) == f
        assert setup_host_path({"path": str(sock_path), "type": "Socket"}) == sock_path
        assert setup_host_path({"path": "/dev/null", "type": "CharDevice"})
        assert setup_host_path({"path": str(tmp_path / "anything")}) == tmp_path / "anything", "no type: no check"
        for path, kind, words in [(f, "Directory", "is not a directory"), (d, "File", "is not a file"),
                                  (f, "Socket", "is not a socket file"), (d, "CharDevice", "is not a character device"),
                                  ("/dev/null", "BlockDevice", "is not a block device"),
                                  (tmp_path / "missing", "Directory", "is not a directory (it does not exist)")]:
            with pytest.raises(VolumeSourceError, match=re.escape(f"hostPath type check failed: {path} {words}")):
                setup_host_path({"path": str(path), "type": kind})
    finally:
        sock.close()
    created = setup_host_path({"path": str(tmp_path / "new" / "dir"), "type": "DirectoryOrCreate"})
    assert created.is_dir() and created.stat().st_mode & 0o777 == 0o755
    made = setup_host_path({"path": str(tmp_path / "new-file"), "type": "FileOrCreate"})
    assert made.is_file() and made.stat().st_mode & 0o777 == 0o644
    with pytest.raises(VolumeSourceError, match="parent directory"):
        setup_host_path({"path": str(tmp_path / "no" / "file"), "type": "FileOrCreate"})
    with pytest.raises(VolumeSourceError, match="is not one of"):
        setup_host_path({"path": str(d), "type": "Folder"})
    with pytest.raises(VolumeSourceError, match="absolute path"):
        setup_host_path({"path": "relative"})


def test_memory_backed_empty_dir_size():
    assert memory_size(pod(), {"sizeLimit": "16Mi"}, NODE.memory_bytes) == 16 * 2**20
    assert memory_size(pod(limits={"memory": "64Mi"}), {}, NODE.memory_bytes) == 64 * 2**20
    assert memory_size(pod(), {}, NODE.memory_bytes) == NODE.memory_bytes, "no limit: node allocatable"
    assert memory_size(pod(limits={"memory": "64Mi"}), {"sizeLimit": "1Gi"}, NODE.memory_bytes) == 64 * 2**20, \
        "a sizeLimit beyond the pod's limit: the pod's limit"
    assert memory_size(pod(), {"sizeLimit": "1Ti"}, NODE.memory_bytes) == NODE.memory_bytes


# -- CSI and tokens ---------------------------------------------------------------------------


def test_token_refresh_at_eighty_percent_or_a_day():
    tok = _Token("t", issued=1000.0, expires=1000.0 + 3600)
    assert not token_needs_refresh(tok, 1000.0 + 0.79 * 3600)
    assert token_needs_refresh(tok, 1000.0 + 0.81 * 3600)
    long = _Token("t", issued=0.0, expires=7 * 24 * 3600.0)
    assert token_needs_refresh(long, 24 * 3600 + 1), "tokens are renewed at least daily"


def test_csi_names_are_the_kubelets():
    assert ephemeral_handle("u1", "vol") == ephemeral_handle("u1", "vol") != ephemeral_handle("u2", "vol")
    assert ephemeral_handle("u1", "vol").startswith("csi-") and len(ephemeral_handle("u1", "vol")) == 68
    assert attachment_name("h", "d", "n").startswith("csi-")


async def test_pvc_resolution_and_attach_wait(tmp_path):
    objects = FakeObjectSource()
    volumes = CSIVolumes(Layout(tmp_path), PluginRegistry(tmp_path / "reg"), objects, "node1")
    p = pod(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}])
    vol = p.spec.volumes[0]
    with pytest.raises(VolumeSourceError, match='persistentvolumeclaim "claim" not found'):
        await volumes.resolve(p, vol)
    objects.claims[("ns", "claim")] = {"spec": {"volumeName": "pv1"}, "status": {"phase": "Pending"}}
    with pytest.raises(VolumeSourceError, match="is not bound"):
        await volumes.resolve(p, vol)
    objects.claims[("ns", "claim")]["status"]["phase"] = "Bound"
    objects.volumes["pv1"] = {"spec": {"accessModes": ["ReadWriteMany"], "mountOptions": ["noatime"],
                                       "csi": {"driver": "d.example", "volumeHandle": "h1", "fsType": "ext4",
                                               "volumeAttributes": {"k": "v"}}}}
    resolved = await volumes.resolve(p, vol)
    assert (resolved.driver, resolved.volume_handle, resolved.spec_name, resolved.ephemeral) == ("d.example", "h1", "pv1", False)
    assert resolved.mount_flags == ["noatime"] and resolved.volume_context == {"k": "v"}
    assert resolved.claim == ("ns", "claim")
    from services.volume.csi_volumes import AttachPending
    with pytest.raises(AttachPending, match="requires attach"):
        await volumes._attachment(resolved)
    objects.attachments[attachment_name("h1", "d.example", "node1")] = {
        "status": {"attached": True, "attachmentMetadata": {"dev": "/dev/x"}}}
    assert await volumes._attachment(resolved) == {"dev": "/dev/x"}
    objects.drivers["d.example"] = {"spec": {"attachRequired": False}}
    objects.attachments.clear()
    assert await volumes._attachment(resolved) == {}


def test_registration_accepts_only_csi_v1_plugins():
    ok = registration.PluginInfo(type="CSIPlugin", name="d", supported_versions=["1.0.0"])
    assert PluginRegistry._check(ok) == ""
    assert "only CSIPlugin" in PluginRegistry._check(registration.PluginInfo(type="DevicePlugin", name="d",
                                                                             supported_versions=["v1beta1"]))
    assert "no supported CSI version" in PluginRegistry._check(registration.PluginInfo(
        type="CSIPlugin", name="d", supported_versions=["0.3.0"]))


def test_disk_usage_counts_blocks_and_skips_symlinks(tmp_path):
    from services.volume.usage import disk_usage
    (tmp_path / "a").write_bytes(b"x" * 100_000)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"y" * 50_000)
    os.symlink("/usr", tmp_path / "link")
    used = disk_usage(tmp_path)
    assert 150_000 <= used < 200_000, used
    assert disk_usage(tmp_path / "missing") == 0


# -- one pod's failure ------------------------------------------------------------------------


class _RecordingBus:
    """Stands in for shared.bus.client.Bus: the manager only publishes."""

    def __init__(self) -> None:
        self.published: list = []

    async def publish(self, event) -> None:
        self.published.append(event)


async def test_an_unexpected_failure_in_one_pod_does_not_hold_back_the_others(tmp_path, settings):
    from services.volume.manager import VolumeManager
    from shared.bus.events import RecordingRecorder
    from shared.store import DesiredPod, PodVolume, Store

    class Broken(FakeObjectSource):
        async def config_map(self, namespace, name):
            if name == "boom":
                raise RuntimeError("boom")
            return await super().config_map(namespace, name)

    objects = Broken()
    objects.config_maps[("ns", "good")] = {"data": {"k": "v"}}
    pod_store = Store(settings.store_path, writer="pod-sync")
    pod_store.create_schema()
    with pod_store.session() as s:
        for uid, cm in (("bad", "boom"), ("good", "good")):
            p = pod(volumes=[{"name": "cfg", "configMap": {"name": cm}}], uid=uid)
            s.add(DesiredPod(uid=uid, namespace="ns", name=f"p-{uid}", source="api", manifest=p.to_manifest()))
    events = RecordingRecorder()
    layout = Layout(tmp_path)
    manager = VolumeManager(Store(settings.store_path, writer="volume"), _RecordingBus(), layout,
                            CSIVolumes(layout, PluginRegistry(tmp_path / "reg"), objects, "node1"), objects, NODE,
                            None, events, resync_every=60)
    await manager.reconcile(None)
    with pod_store.session() as s:
        rows = {r.pod_uid: r for r in s.query(PodVolume)}
    assert rows["good"].ready and (layout.volume_dir("good", "kubernetes.io~configmap", "cfg") / "k").read_text() == "v"
    assert not rows["bad"].ready and rows["bad"].reason == "FailedMount"
    assert rows["bad"].message == 'MountVolume.SetUp failed for volume "cfg" : internal error: RuntimeError: boom'
    assert ("Warning", "FailedMount") in [(e[0], e[1]) for e in events.events]
    # Each pod was registered with the objects it reads before its volumes were set up (the
    # Cache strategy reads them afresh for a pod seen for the first time).
    assert objects.registered == {"good": {("configmap", "ns", "good")}, "bad": {("configmap", "ns", "boom")}}


async def test_an_image_volume_is_ready_with_nothing_on_the_host(tmp_path, settings):
    """The runtime mounts an image volume itself: its row is ready, with no host path to
    bind-mount, and nothing is made under the pod's volumes directory."""
    from services.volume.manager import VolumeManager
    from shared.bus.events import RecordingRecorder
    from shared.store import DesiredPod, PodVolume, Store

    pod_store = Store(settings.store_path, writer="pod-sync")
    pod_store.create_schema()
    p = pod(volumes=[{"name": "img", "image": {"reference": "reg/kitten:1.7"}}],
            mounts=[{"name": "img", "mountPath": "/volume"}])
    with pod_store.session() as s:
        s.add(DesiredPod(uid="u1", namespace="ns", name="p", source="api", manifest=p.to_manifest()))
    layout = Layout(tmp_path)
    objects = FakeObjectSource()
    manager = VolumeManager(Store(settings.store_path, writer="volume"), _RecordingBus(), layout,
                            CSIVolumes(layout, PluginRegistry(tmp_path / "reg"), objects, "node1"), objects, NODE,
                            None, RecordingRecorder(), resync_every=60)
    await manager.reconcile(None)
    with pod_store.session() as s:
        [row] = s.query(PodVolume).all()
    assert (row.name, row.plugin, row.ready, row.host_path) == ("img", "kubernetes.io/image", True, "")
    assert not (layout.pod_dir("u1") / "volumes").exists()
