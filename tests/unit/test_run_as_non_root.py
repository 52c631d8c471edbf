"""runAsNonRoot as the kubelet enforces it: against runAsUser, else the image's user; a container
that would run as root is not created (CreateContainerConfigError with the kubelet's words)."""

from __future__ import annotations

import pytest

from tests.unit.conftest import IMG
from tests.unit.test_syncer import manifest, observed, want

WHO = '(pod: "p_default(uid1)", container: app)'


async def waiting(syncer, store, **security) -> tuple[str, str]:
    want(store, manifest(containers=[{"name": "app", "image": IMG, "securityContext": security}]))
    await syncer.sync("uid1")
    [c] = observed(store).containers
    return c["waiting_reason"], c["waiting_message"]


@pytest.mark.parametrize("image_user, security, message", [
    ((None, ""), {"runAsNonRoot": True}, f"container has runAsNonRoot and image will run as root {WHO}"),
    ((0, ""), {"runAsNonRoot": True}, f"container has runAsNonRoot and image will run as root {WHO}"),
    ((None, "www"), {"runAsNonRoot": True},
     f"container has runAsNonRoot and image has non-numeric user (www), cannot verify user is non-root {WHO}"),
    ((1000, ""), {"runAsNonRoot": True, "runAsUser": 0}, f"container's runAsUser breaks non-root policy {WHO}"),
])
async def test_a_container_that_would_run_as_root_is_not_created(syncer, rt, store, events, image_user, security,
                                                                   message):
    rt.image_users[rt.images[IMG]] = image_user
    assert await waiting(syncer, store, **security) == ("CreateContainerConfigError", message)
    assert rt.ops("create_container") == []
    assert ("Warning", "Failed", f"Error: {message}") in events.events


@pytest.mark.parametrize("image_user, security", [
    ((1000, ""), {"runAsNonRoot": True}),  # the image's numeric user
    ((None, ""), {"runAsNonRoot": True, "runAsUser": 1000}),  # runAsUser decides, not the image
    ((None, ""), {"runAsNonRoot": False}),
])
async def test_non_root_containers_start(syncer, rt, store, image_user, security):
    rt.image_users[rt.images[IMG]] = image_user
    assert await waiting(syncer, store, **security) == ("", "")
    assert rt.running()


async def test_the_pods_runAsNonRoot_applies_to_its_containers(syncer, rt, store):
    want(store, manifest(securityContext={"runAsNonRoot": True}))
    await syncer.sync("uid1")
    assert observed(store).containers[0]["waiting_reason"] == "CreateContainerConfigError"
