"""imagePullSecrets: registry logins read from dockerconfigjson / dockercfg secrets, matched to
the image as the kubelet's keyring does, tried in turn on PullImage."""

from __future__ import annotations

import base64
import json

import pytest

from services.pod_sync.env_sources import StaticEnvSource
from services.pod_sync.pull_secrets import (
    Credential,
    PullSecretInvalid,
    credentials_from_secret,
    image_location,
    lookup,
)
from tests.unit.test_syncer import manifest, observed, want

REG = "registry.example.com:5000"
IMAGE = f"{REG}/team/app:1"


def dockerconfigjson(auths: dict) -> dict[str, str]:
    return {".dockerconfigjson": json.dumps({"auths": auths})}


@pytest.mark.parametrize("image, where", [
    ("busybox", ("docker.io", "", "library/busybox")),
    ("user/app:1", ("docker.io", "", "user/app")),
    ("localhost/app", ("localhost", "", "app")),
    (f"{REG}/team/app@sha256:ab", ("registry.example.com", "5000", "team/app")),
    ("index.docker.io/library/nginx:1", ("docker.io", "", "library/nginx")),
])
def test_image_locations(image, where):
    loc = image_location(image)
    assert (loc.host, loc.port, loc.path) == where


def test_keys_match_host_port_and_path_prefix_most_specific_first():
    creds = [Credential("registry.example.com:5000", "a", "1"),
             Credential("https://registry.example.com:5000/team", "b", "2"),
             Credential("*.example.com:5000", "c", "3"),
             Credential("registry.example.com", "d", "4"),           # no port: another registry
             Credential("registry.example.com:5000/teamx", "e", "5"),  # a prefix of the name, not of the path
             Credential("https://index.docker.io/v1/", "hub", "6")]
    assert [c.username for c in lookup(creds, IMAGE)] == ["b", "a", "c"]
    assert [c.username for c in lookup(creds, "busybox:1.36")] == ["hub"]
    assert lookup(creds, "quay.io/x/y") == []


def test_both_secret_formats_and_auth_strings():
    auth = base64.b64encode(b"bob:pa:ss").decode()
    [c] = credentials_from_secret("kubernetes.io/dockerconfigjson", dockerconfigjson({REG: {"auth": auth}}))
    assert (c.username, c.password) == ("bob", "pa:ss")
    [c] = credentials_from_secret("kubernetes.io/dockercfg",
                                  {".dockercfg": json.dumps({REG: {"username": "u", "password": "p"}})})
    assert (c.key, c.username, c.password) == (REG, "u", "p")


@pytest.mark.parametrize("data, why", [
    ({"token": "x"}, "neither .dockerconfigjson nor .dockercfg"),
    ({".dockerconfigjson": "{not json"}, "not JSON"),
    ({".dockerconfigjson": "[]"}, "no registry entries"),
    (dockerconfigjson({REG: "x"}), "is not an object"),
    (dockerconfigjson({REG: {"auth": "%%%"}}), "not base64"),
    (dockerconfigjson({f"r{i}": {} for i in range(300)}), "at most 256"),
])
def test_a_secret_without_usable_logins_says_why_without_quoting_it(data, why):
    with pytest.raises(PullSecretInvalid, match=why) as err:
        credentials_from_secret("kubernetes.io/dockerconfigjson", data)
    assert "%%%" not in str(err.value)


def _pod_with_secrets(*names):
    return manifest(containers=[{"name": "app", "image": IMAGE}], imagePullSecrets=[{"name": n} for n in names])


async def test_the_pods_login_is_passed_to_pull_image(syncer, rt, store, events):
    rt.registry_logins[IMAGE] = ("bob", "secret")
    syncer.env_source = StaticEnvSource(secrets={
        ("default", "wrong"): dockerconfigjson({REG: {"username": "bob", "password": "nope"}}),
        ("default", "right"): dockerconfigjson({f"{REG}/team": {"username": "bob", "password": "secret"}})})
    want(store, _pod_with_secrets("wrong", "right", "gone"))
    await syncer.sync("uid1")
    assert rt.pull_auths == [(IMAGE, ("bob", "secret"))], "the more specific key first, and it worked"
    [c] = observed(store).containers
    assert c["state"] == "running"
    assert any(e[1] == "FailedToRetrieveImagePullSecret" and "gone: not found" in e[2] for e in events.events)


async def test_without_a_matching_login_the_pull_fails_with_the_registrys_answer(syncer, rt, store):
    rt.registry_logins[IMAGE] = ("bob", "secret")
    syncer.env_source = StaticEnvSource(secrets={
        ("default", "other"): dockerconfigjson({"quay.io": {"username": "bob", "password": "secret"}})})
    want(store, _pod_with_secrets("other"))
    await syncer.sync("uid1")
    assert rt.pull_auths == [(IMAGE, None)], "no key matched: anonymous"
    [c] = observed(store).containers
    assert c["waiting_reason"] == "ErrImagePull" and "401 Unauthorized" in c["waiting_message"]


async def test_a_standalone_node_says_it_cannot_read_pull_secrets(syncer, rt, store, events):
    syncer.env_source = StaticEnvSource(api=False)
    want(store, _pod_with_secrets("reg"))
    await syncer.sync("uid1")
    assert any(e[1] == "FailedToRetrieveImagePullSecret" and "no API server" in e[2] for e in events.events)
