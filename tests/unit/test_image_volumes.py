"""Image volumes (volumes[].image): the pod as parsed, the pulls, the CRI mounts, the failures."""

import pytest
from cri_api.v1 import api_pb2 as cri

from services.pod_sync.image_volumes import runtime_refusal
from shared.model.podspec import ManifestInvalid, validate_pod
from shared.store import PodRuntime, PodVolume, Store
from tests.unit.conftest import IMG
from tests.unit.test_syncer import want

VOLUME_IMAGE = "reg/kitten:1.7"


def pod(volumes, mounts, uid="uid1", containers=None):
    containers = containers or [{"name": "app", "image": IMG, "volumeMounts": mounts}]
    return validate_pod({"metadata": {"name": "p", "uid": uid, "annotations": {"team": "a"}},
                         "spec": {"containers": containers, "volumes": volumes}})


def image_volume(name="vol", reference=VOLUME_IMAGE, **source):
    return {"name": name, "image": {"reference": reference, **source}}


def volume_rows(settings, *names, uid="uid1"):
    """What the volume service writes for image volumes: ready, nothing on the host."""
    vol = Store(settings.store_path, writer="volume")
    with vol.session() as s:
        for name in names:
            s.merge(PodVolume(pod_uid=uid, name=name, plugin="kubernetes.io/image", host_path="", ready=True))
    vol.close()


def container(store, name="app", uid="uid1"):
    with store.session() as s:
        row = s.get(PodRuntime, uid)
        return next(c for c in row.containers if c["name"] == name)


def test_the_pull_policy_defaults_as_the_api_servers():
    p = pod([image_volume("a", "reg/x:1"), image_volume("b", "reg/x"), image_volume("c", "reg/x:latest"),
             image_volume("d", "reg/x:1", pullPolicy="Never")], [])
    assert [v.image.pullPolicy for v in p.spec.volumes] == ["IfNotPresent", "Always", "Always", "Never"]
    assert p.spec.volumes[0].image.reference == "reg/x:1"


@pytest.mark.parametrize("source, words", [
    ({}, "image.reference: Field required"),
    ({"reference": ""}, "image.reference: must not be empty"),
    ({"reference": " reg/x:1"}, "image.reference: must not have leading or trailing whitespace"),
    ({"reference": "reg/x:1", "pullPolicy": "Sometimes"}, "image.pullPolicy"),
    ({"reference": "reg/x:1", "digest": "sha256:00"}, "image: digest: unknown field"),
])
def test_a_bad_image_source_refuses_the_pod_naming_the_field(source, words):
    with pytest.raises(ManifestInvalid) as err:
        pod([{"name": "vol", "image": source}], [])
    assert words in str(err.value)


@pytest.mark.parametrize("name, version, sub_path, refused", [
    ("containerd", "1.6.20", False, "image volumes need containerd 2.1 or newer, and this node runs containerd 1.6.20"),
    ("containerd", "v2.0.5", False, "need containerd 2.1"),
    ("containerd", "v2.1.0", False, None),
    ("containerd", "v2.1.3", True, "image volumes with a subPath need containerd 2.2 or newer"),
    ("containerd", "2.4.2", True, None),
    ("cri-o", "1.30.0", True, None),  # another runtime says itself what it lacks
])
def test_which_runtimes_mount_image_volumes(name, version, sub_path, refused):
    why = runtime_refusal(cri.VersionResponse(runtime_name=name, runtime_version=version), sub_path)
    assert (why is None) if refused is None else (refused in why)


def counted() -> tuple[float, float, float]:
    from services.pod_sync import metrics as M

    return (M.IMAGE_VOLUME_REQUESTED._value.get(), M.IMAGE_VOLUME_MOUNTED._value.get(),
            M.IMAGE_VOLUME_MOUNT_ERRORS._value.get())


async def test_the_image_is_pulled_and_mounted_read_only_by_the_runtime(syncer, rt, store, settings, events):
    before = counted()
    want(store, pod([image_volume()], [{"name": "vol", "mountPath": "/volume"},
                                        {"name": "vol", "mountPath": "/etc-only", "subPath": "etc"}]))
    volume_rows(settings, "vol")
    await syncer.sync("uid1")
    assert [ref for op, ref in rt.ops("pull_image")] == [VOLUME_IMAGE], "pulled once for two mounts"
    [config] = rt.created_configs.values()
    mounts = {m.container_path: m for m in config.mounts}
    whole, etc = mounts["/volume"], mounts["/etc-only"]
    assert whole.image.image == rt.images[VOLUME_IMAGE] and whole.image.user_specified_image == VOLUME_IMAGE
    assert dict(whole.image.annotations) == {"team": "a"}
    assert (whole.host_path, whole.readonly, whole.image_sub_path) == ("", True, "")
    assert (etc.image_sub_path, etc.readonly) == ("etc", True)
    assert container(store)["state"] == "running"
    said = [(reason, message) for _, reason, message in events.events]
    assert ("Pulling", f'Pulling image "{VOLUME_IMAGE}"') in said
    assert any(r == "Pulled" and m.startswith(f'Successfully pulled image "{VOLUME_IMAGE}"') for r, m in said)
    after = counted()
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (1, 2, 0), \
        "the kubelet's counters: one volume requested, two mounts"


async def test_a_mount_the_runtime_fails_is_a_create_error_and_counted(syncer, rt, store, settings):
    rt.images[VOLUME_IMAGE] = "sha256:" + "7" * 64
    want(store, pod([image_volume()], [{"name": "vol", "mountPath": "/volume"}]))
    volume_rows(settings, "vol")
    before = counted()
    real_status = rt.image_status

    async def vanished_after_status(ref):  # present when asked, gone when the runtime mounts it
        found = await real_status(ref)
        if ref == VOLUME_IMAGE:
            rt.images.pop(VOLUME_IMAGE, None)
        return found

    rt.image_status = vanished_after_status
    await syncer.sync("uid1")
    app = container(store)
    assert app["waiting_reason"] == "CreateContainerError"
    assert app["waiting_message"].startswith("ImageVolumeMountFailed: ")
    assert counted()[2] - before[2] == 1


async def test_a_present_image_is_not_pulled_again_unless_the_policy_says_always(syncer, rt, store, settings):
    rt.images[VOLUME_IMAGE] = "sha256:" + "7" * 64
    want(store, pod([image_volume("once"), image_volume("always", pullPolicy="Always")],
                    [{"name": "once", "mountPath": "/once"}, {"name": "always", "mountPath": "/always"}]))
    volume_rows(settings, "once", "always")
    await syncer.sync("uid1")
    assert len(rt.ops("pull_image")) == 1, "only the volume whose policy is Always pulls"
    assert container(store)["state"] == "running"


async def test_a_volume_that_cannot_be_pulled_holds_only_the_containers_that_mount_it(syncer, rt, store, settings,
                                                                                      events):
    rt.pull_errors["localhost/invalid"] = "not found"
    want(store, pod([image_volume(reference="localhost/invalid")], [], containers=[
        {"name": "mounts", "image": IMG, "volumeMounts": [{"name": "vol", "mountPath": "/volume"}]},
        {"name": "ignores", "image": IMG}]))
    volume_rows(settings, "vol")
    await syncer.sync("uid1")
    mounts = container(store, "mounts")
    assert mounts["waiting_reason"] == "ErrImagePull"
    assert mounts["waiting_message"] == 'Failed to pull image "localhost/invalid": not found'
    assert container(store, "ignores")["state"] == "running"
    assert ("Failed", "Error: ErrImagePull") in [(reason, message) for _, reason, message in events.events]
    await syncer.sync("uid1")
    assert container(store, "mounts")["waiting_reason"] == "ImagePullBackOff"
    assert len(rt.ops("pull_image")) == 1, "backing off, as for a container's image"


async def test_a_volume_no_container_mounts_is_not_pulled(syncer, rt, store, settings):
    rt.pull_errors["localhost/invalid"] = "not found"
    want(store, pod([image_volume(reference="localhost/invalid")], []))
    volume_rows(settings, "vol")
    await syncer.sync("uid1")
    assert rt.ops("pull_image") == []
    assert container(store)["state"] == "running"


async def test_never_pull_of_an_absent_volume_image(syncer, rt, store, settings):
    want(store, pod([image_volume(pullPolicy="Never")], [{"name": "vol", "mountPath": "/volume"}]))
    volume_rows(settings, "vol")
    await syncer.sync("uid1")
    app = container(store)
    assert app["waiting_reason"] == "ErrImageNeverPull"
    assert app["waiting_message"] == f'Container image "{VOLUME_IMAGE}" is not present with pull policy of Never'


async def test_an_old_containerd_refuses_the_container_before_anything_is_pulled(syncer, rt, store, settings):
    rt.runtime_name, rt.runtime_version = "containerd", "1.6.20"
    want(store, pod([image_volume()], [{"name": "vol", "mountPath": "/volume"}]))
    volume_rows(settings, "vol")
    await syncer.sync("uid1")
    app = container(store)
    assert app["waiting_reason"] == "CreateContainerConfigError"
    assert app["waiting_message"].startswith("volume 'vol': image volumes need containerd 2.1 or newer, "
                                             "and this node runs containerd 1.6.20")
    assert rt.ops("pull_image") == [] and rt.created_configs == {}


async def test_the_image_of_a_wanted_pods_volume_is_not_garbage_collected(rt, store):
    from services.pod_sync.disk_gc import DiskReclaimer
    from tests.unit.test_pod_sync_eviction import Bus

    rt.images[VOLUME_IMAGE] = "sha256:" + "7" * 64
    rt.images["reg/unused:1"] = "sha256:" + "8" * 64
    want(store, pod([image_volume()], [{"name": "vol", "mountPath": "/volume"}]))
    gc = DiskReclaimer(rt, store, Bus(), high_percent=85, low_percent=80, min_age=0)
    removed = (await gc.free_images(None, "test")).images
    assert "reg/unused:1" in removed and VOLUME_IMAGE not in removed
    assert VOLUME_IMAGE in rt.images
