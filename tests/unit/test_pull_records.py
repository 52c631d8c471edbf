"""An image on the node is used only by pods that could have pulled it (KubeletEnsureSecretPulledImages,
services/pod_sync/pull_records.py) through the image manager over a fake runtime whose registry
wants a login: who pulled with which secret, who may use the image after, and the policies."""

from __future__ import annotations

import json

import pytest

from services.pod_sync.images import ImageManager, ImagePullError
from services.pod_sync.pull_records import Policy, PullRecords, SecretRef
from services.pod_sync.pull_secrets import credentials_from_secret
from shared.config.settings import KubeletConfiguration
from shared.model.image_names import allowlist_pattern, image_without_tag_or_digest
from shared.runtime.cri.fake import FakeRuntime
from shared.tasks.retry import Backoff

PRIVATE = "registry.example:5000/team/app:1.0"
LOGIN = ("puller", "s3cret")


def secret(namespace: str, name: str, uid: str, login=LOGIN, registry="registry.example:5000"):
    auths = {registry: {"username": login[0], "password": login[1]}}
    return credentials_from_secret("kubernetes.io/dockerconfigjson", {".dockerconfigjson": json.dumps({"auths": auths})},
                                   (namespace, name, uid))


@pytest.fixture
def node(tmp_path):
    rt = FakeRuntime(images=["busybox:latest"])
    rt.registry_logins[PRIVATE] = LOGIN
    records = PullRecords(tmp_path / "image_manager")
    records.prepare([(ref, [tag]) for tag, ref in rt.images.items()])
    return rt, records, ImageManager(rt, Backoff(10, 300), records=records)


async def test_a_pod_without_the_secret_that_pulled_an_image_pulls_it_again_and_is_refused(node):
    rt, _, images = node
    first = await images.ensure_image("pod-a", PRIVATE, "IfNotPresent", None, credentials=secret("a", "regcred", "u1"))
    assert first.pulled_seconds is not None and rt.pull_auths == [(PRIVATE, LOGIN)]
    # another namespace, no secret: the image is on the node, but this pod must pull it itself
    with pytest.raises(ImagePullError) as exc:
        await images.ensure_image("pod-b", PRIVATE, "IfNotPresent", None, credentials=[])
    assert exc.value.reason == "ErrImagePull" and "401 Unauthorized" in exc.value.message
    assert rt.pull_auths[-1] == (PRIVATE, None)
    with pytest.raises(ImagePullError) as exc:
        await images.ensure_image("pod-c", PRIVATE, "Never", None, credentials=[])
    assert (exc.value.reason, exc.value.message) == (
        "ErrImageNeverPull", f'Container image "{PRIVATE}" is not present with pull policy of Never')


async def test_the_same_secret_or_another_with_the_same_login_may_use_it_without_a_pull(node):
    rt, records, images = node
    await images.ensure_image("pod-a", PRIVATE, "IfNotPresent", None, credentials=secret("a", "regcred", "u1"))
    pulls = len(rt.pull_auths)
    same = await images.ensure_image("pod-a2", PRIVATE, "IfNotPresent", None, credentials=secret("a", "regcred", "u1"))
    twin = await images.ensure_image("pod-b", PRIVATE, "Never", None, credentials=secret("b", "other", "u2"))
    assert same.pulled_seconds is None and twin.pulled_seconds is None and len(rt.pull_auths) == pulls
    # the record now names both secrets, in the kubelet's format
    [path] = list((records.pulled_dir).iterdir())
    record = json.loads(path.read_text())
    assert record["kind"] == "ImagePulledRecord" and record["imageRef"] == rt.images[PRIVATE]
    names = [(s["namespace"], s["name"], s["uid"]) for s in
             record["credentialMapping"]["registry.example:5000/team/app"]["kubernetesSecrets"]]
    assert names == [("a", "regcred", "u1"), ("b", "other", "u2")]
    # a secret with another login for that registry is not enough
    with pytest.raises(ImagePullError):
        await images.ensure_image("pod-c", PRIVATE, "IfNotPresent", None,
                                  credentials=secret("c", "wrong", "u3", login=("puller", "guess")))


async def test_an_image_pulled_without_a_login_and_a_preloaded_one_are_anyones(node):
    rt, _, images = node
    rt.images.pop("busybox:latest")
    await images.ensure_image("pod-a", "busybox:latest", "Always", None)
    assert (await images.ensure_image("pod-b", "busybox:latest", "Never", None,
                                      credentials=secret("b", "x", "u9"))).pulled_seconds is None
    rt.images["preloaded:1"] = "sha256:" + "e" * 64  # put there by other means: no record
    assert (await images.ensure_image("pod-c", "preloaded:1", "Never", None)).pulled_seconds is None


async def test_always_verify_checks_preloaded_images_and_never_verify_nothing(tmp_path):
    rt = FakeRuntime(images=["preloaded:1"])
    images = ImageManager(rt, Backoff(10, 300), records=PullRecords(tmp_path, Policy("AlwaysVerify")))
    images.records.prepare([])
    ensured = await images.ensure_image("pod", "preloaded:1", "IfNotPresent", None)
    assert ensured.pulled_seconds is not None, "verified by a pull (anonymous here, and allowed)"
    assert (await images.ensure_image("pod2", "preloaded:1", "Never", None)).pulled_seconds is None

    rt2 = FakeRuntime()
    rt2.registry_logins[PRIVATE] = LOGIN
    lax = ImageManager(rt2, Backoff(10, 300), records=PullRecords(tmp_path / "lax", Policy("NeverVerify")))
    lax.records.prepare([])
    await lax.ensure_image("pod-a", PRIVATE, "IfNotPresent", None, credentials=secret("a", "regcred", "u1"))
    assert (await lax.ensure_image("pod-b", PRIVATE, "Never", None)).pulled_seconds is None


def test_the_allowlist_spares_only_the_images_it_names():
    policy = Policy("NeverVerifyAllowlistedImages", ["registry.example:5000/team/*", "docker.io/library/busybox"])
    assert not policy.verifies("registry.example:5000/team/app:1.0", pulled_by_node=True)
    assert not policy.verifies("docker.io/library/busybox:1.36", pulled_by_node=True)
    assert policy.verifies("registry.example:5000/other/app:1.0", pulled_by_node=False), "preloaded, not listed"


async def test_an_interrupted_pull_leaves_its_image_verified_and_an_unreadable_record_verifies(tmp_path):
    rt = FakeRuntime(images=["was-pulling:1"])
    records = PullRecords(tmp_path)
    records.prepare([])
    records.pulling("was-pulling:1")  # the crash: the intent stays
    again = PullRecords(tmp_path)
    again.prepare([(rt.images["was-pulling:1"], ["was-pulling:1"])])
    assert not list(again.pulling_dir.iterdir()), "the intent is resolved into a record"
    assert again.must_pull("was-pulling:1", rt.images["was-pulling:1"], []), "a record without credentials"
    # a record file that is not JSON: verify, never trust
    (again.pulled_dir / next(again.pulled_dir.iterdir()).name).write_text("{garbage")
    assert again.must_pull("was-pulling:1", rt.images["was-pulling:1"], [SecretRef("a", "b", "c", "h")])


def test_records_of_removed_images_go(tmp_path):
    records = PullRecords(tmp_path)
    records.prepare([])
    records.pulled("app:1", "sha256:" + "1" * 64, None)
    records.pulled("app:2", "sha256:" + "2" * 64, None)
    records.forget(["sha256:" + "1" * 64])
    records.prepare([("sha256:" + "3" * 64, ["other:1"])])
    assert list(records.pulled_dir.iterdir()) == []


@pytest.mark.parametrize("image,name", [
    ("busybox", "busybox"), ("busybox:1.36", "busybox"), ("localhost:5000/team/app", "localhost:5000/team/app"),
    ("localhost:5000/team/app:v2", "localhost:5000/team/app"),
    ("docker.io/library/busybox@sha256:" + "a" * 64, "docker.io/library/busybox"),
    ("busybox:1.36@sha256:" + "a" * 64, "busybox"),
])
def test_records_are_keyed_by_the_image_without_tag_or_digest(image, name):
    assert image_without_tag_or_digest(image) == name


def test_the_policy_and_allowlist_take_the_kubelets_values_and_words():
    ok = KubeletConfiguration.model_validate({"imagePullCredentialsVerificationPolicy": "NeverVerifyAllowlistedImages",
                                              "preloadedImagesVerificationAllowlist": ["registry.example/*"]})
    assert ok.preloaded_images_verification_allowlist == ["registry.example/*"]
    with pytest.raises(ValueError, match='option "Sometimes" specified for imagePullCredentialsVerificationPolicy. '
                                         'Valid options are "NeverVerify", "NeverVerifyPreloadedImages", '
                                         '"NeverVerifyAllowlistedImages" or "AlwaysVerify"'):
        KubeletConfiguration.model_validate({"imagePullCredentialsVerificationPolicy": "Sometimes"})
    with pytest.raises(ValueError, match="can't set `preloadedImagesVerificationAllowlist` if"):
        KubeletConfiguration.model_validate({"preloadedImagesVerificationAllowlist": ["registry.example/*"]})
    assert allowlist_pattern("registry.example/app:1.0") == \
        "neither tag nor digest is accepted in an image reference: registry.example/app:1.0"
    assert allowlist_pattern("registry.*/app") == \
        "not a valid wildcard pattern, only patterns ending with '/*' are allowed: registry.*/app"
    assert allowlist_pattern("/*") == "at least registry hostname is required"


async def test_checks_requests_and_records_are_counted_under_the_kubelets_metric_names(node):
    from prometheus_client import REGISTRY

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    rt, records, images = node
    before = {r: value("kubelet_imagemanager_image_mustpull_checks_total", result=r)
              for r in ("credentialRecordFound", "mustAuthenticate")}
    requests = value("kubelet_image_manager_ensure_image_requests_total", pull_policy="ifnotpresent",
                     present_locally="true", pull_required="false")
    await images.ensure_image("pod-a", PRIVATE, "IfNotPresent", None, credentials=secret("a", "regcred", "u1"))
    await images.ensure_image("pod-a2", PRIVATE, "IfNotPresent", None, credentials=secret("a", "regcred", "u1"))
    with pytest.raises(ImagePullError):
        await images.ensure_image("pod-b", PRIVATE, "Never", None)
    assert value("kubelet_imagemanager_image_mustpull_checks_total", result="credentialRecordFound") == \
        before["credentialRecordFound"] + 1
    assert value("kubelet_imagemanager_image_mustpull_checks_total", result="mustAuthenticate") == \
        before["mustAuthenticate"] + 1
    assert value("kubelet_image_manager_ensure_image_requests_total", pull_policy="ifnotpresent",
                 present_locally="true", pull_required="false") == requests + 1
    assert value("kubelet_imagemanager_ondisk_pulledrecords") == len(list(records.pulled_dir.iterdir())) == 1
    assert value("kubelet_imagemanager_ondisk_pullintents") == 0
