"""Updates of a running API pod: labels and annotations, a new image (the container is
restarted), activeDeadlineSeconds (the pod fails with DeadlineExceeded)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from services.pod_sync.api_source import ApiPodSource
from services.status_reporter.pod_status import compute_status
from shared.model.podspec import PodCache
from shared.store import DesiredPod, ManifestError
from shared.store.models import utcnow
from tests.unit.test_syncer import manifest, observed, want


def api_pod(rv="1", labels=None, image="busybox:1.29", **spec):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "ns1", "uid": "u1", "resourceVersion": rv,
                         "labels": labels or {"app": "web"}},
            "spec": {"nodeName": "node1", "containers": [{"name": "app", "image": image}], **spec},
            "status": {"phase": "Running"}}


def stored(store) -> dict:
    with store.session() as s:
        return s.get(DesiredPod, "u1").manifest


def test_status_writes_are_not_updates_but_label_changes_are(store):
    source = ApiPodSource(object(), "node1", store)
    assert source.apply_event("ADDED", api_pod()) == {"u1"}
    assert source.apply_event("MODIFIED", api_pod(rv="2")) == set(), "only the resourceVersion moved"
    assert source.apply_event("MODIFIED", api_pod(rv="3", labels={"app": "web", "v": "2"})) == {"u1"}
    assert stored(store)["metadata"]["labels"] == {"app": "web", "v": "2"}
    assert stored(store)["metadata"]["resourceVersion"] == "3"


def test_an_invalid_update_keeps_the_running_version_and_says_why(store):
    source = ApiPodSource(object(), "node1", store)
    source.apply_event("ADDED", api_pod())
    assert source.apply_event("MODIFIED", api_pod(rv="2", image=" ")) == set()
    assert stored(store)["spec"]["containers"][0]["image"] == "busybox:1.29"
    with store.session() as s:
        [err] = s.scalars(select(ManifestError)).all()
    assert err.error.startswith("pod update invalid, still running the previous version: ")


def test_pod_cache_reparses_a_new_resource_version():
    cache = PodCache()
    first = cache.get("u1", api_pod())
    assert cache.get("u1", api_pod()) is first
    assert cache.get("u1", api_pod(rv="2", image="busybox:1.36")).spec.containers[0].image == "busybox:1.36"


async def test_a_new_image_restarts_the_container(syncer, rt, store, events):
    rt.images["reg/app:2"] = "sha256:" + "2" * 64
    want(store, manifest())
    await syncer.sync("uid1")
    [old] = rt.running()
    want(store, manifest(containers=[{"name": "app", "image": "reg/app:2"}]).model_copy(
        update={"metadata": manifest().metadata.model_copy(update={"resourceVersion": "2"})}))
    await syncer.sync("uid1")
    [new] = rt.running()
    assert new.id != old.id and new.metadata.attempt == 1
    assert rt.created_configs[new.id].image.user_specified_image == "reg/app:2"
    assert ("Normal", "Killing", "Container app definition changed, will be restarted") in events.events
    await syncer.sync("uid1")
    assert rt.running()[0].id == new.id, "no restart once it runs the new image"


async def test_active_deadline_fails_the_pod_and_stops_it(syncer, rt, store, events):
    want(store, manifest(activeDeadlineSeconds=30))
    result = await syncer.sync("uid1")
    assert rt.running() and 0 < result.requeue_after <= 30, "woken when the deadline runs out"
    with store.session() as s:
        s.get(DesiredPod, "uid1").seen_at = utcnow() - timedelta(seconds=31)
    await syncer.sync("uid1")
    assert not rt.running() and not any(sb.state == 0 for sb in rt.sandboxes.values())
    with store.session() as s:
        row = s.get(DesiredPod, "uid1")
        assert (row.rejection_reason, row.rejection_message) == (
            "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
    assert ("Normal", "DeadlineExceeded", "Pod was active on the node longer than the specified deadline") \
        in events.events
    obs = observed(store)
    status, why = compute_status(manifest(activeDeadlineSeconds=30),
                                 {"sandbox_ready": False, "pod_ip": "", "containers": obs.containers},
                                 None, rejection=(row.rejection_reason, row.rejection_message))
    assert status["phase"] == "Failed" and status["reason"] == "DeadlineExceeded"
    assert "terminated" in status["containerStatuses"][0]["state"], "the container's status stays"
    assert why.startswith("DeadlineExceeded: ")


# -- API pods this node refuses ------------------------------------------------------------------


def test_a_pod_the_node_cannot_run_is_refused_visibly_and_forgotten_with_its_object(store):
    from services.status_reporter.api_pods import refused_status
    from shared.bus.events import RecordingRecorder
    from shared.store import RefusedPod

    events = RecordingRecorder()
    source = ApiPodSource(object(), "node1", store, events=events)
    bad = api_pod(image="busybox", volumes=[{"name": "v", "emptyDir": {}}])
    bad["spec"]["containers"][0]["volumeMounts"] = [{"name": "v", "mountPath": "/v", "subPathExpr": "$(POD)"}]
    assert source.apply_event("ADDED", bad) == {"u1"}
    with store.session() as s:
        assert s.get(DesiredPod, "u1") is None, "nothing of it is started"
        row = s.get(RefusedPod, "u1")
        status = refused_status(row)
    assert status["phase"] == "Failed" and status["reason"] == "UnsupportedPodSpec"
    assert "subPathExpr is not supported by pykubelet" in status["message"]
    [(kind, reason, message)] = [(e[0], e[1], e[2]) for e in events.events]
    assert (kind, reason) == ("Warning", "UnsupportedPodSpec") and message == status["message"]
    assert source.apply_event("MODIFIED", {**bad, "metadata": {**bad["metadata"], "resourceVersion": "2"}}) == set()
    deleting = {**bad, "metadata": {**bad["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert source.apply_event("MODIFIED", deleting) == {"u1"}
    with store.session() as s:
        assert s.get(RefusedPod, "u1").deleting, "status-reporter removes the object at once"
    assert source.apply_event("DELETED", deleting) == {"u1"}
    with store.session() as s:
        assert s.get(RefusedPod, "u1") is None and not s.scalars(select(ManifestError)).all()


async def test_mirror_pods_in_the_watch_are_not_run_but_wake_their_keeper(store):
    """A mirror pod is the API's copy of a static pod: never a pod to run here, but each change
    to one (a user deleted it) wakes status-reporter, which recreates it."""
    from shared.api.client import ApiError

    mirror = api_pod()
    mirror["metadata"] = {**mirror["metadata"], "uid": "m1", "name": "static-node1",
                          "annotations": {"kubernetes.io/config.mirror": "hash"}}

    class Api:
        async def watch(self, url, version, timeout, **params):
            yield "DELETED", mirror
            yield "ADDED", api_pod(rv="2")
            raise ApiError(410, "Gone")

    woken, changed = [], []

    async def on_mirror():
        woken.append(True)

    async def on_change(uids):
        changed.append(uids)

    source = ApiPodSource(Api(), "node1", store, on_change=on_change, on_mirror=on_mirror)
    await source._watch("1")
    assert woken == [True]
    assert changed == [{"u1"}]
    with store.session() as s:
        assert s.get(DesiredPod, "m1") is None
