"""User namespaces (hostUsers: false): the IDs each pod gets, kept across restarts, and the CRI
configs that carry them."""

import json

import pytest
from cri_api.v1 import api_pb2 as cri

from services.pod_sync.images import ImageManager
from services.pod_sync.syncer import PodSyncer
from services.pod_sync.user_namespaces import (
    IdRange,
    UserNamespaceError,
    UserNamespaces,
    kubelet_id_range,
    parse_getsubids,
)
from shared.config.settings import KubeletConfiguration, NodeSettings
from shared.host.subpath import FakeSubPathMounts
from shared.tasks.retry import Backoff
from tests.unit.conftest import IMG
from tests.unit.test_syncer import manifest, observed, want

UNIT = 65536
DEFAULT = IdRange(UNIT, 2**32 - UNIT)


def test_getsubids_output_is_read_as_the_kubelet_reads_it():
    assert parse_getsubids("0: kubelet 65536 2147483648\n") == IdRange(65536, 2147483648)
    for bad in ("", "0: kubelet 65536\n", "0: kubelet a b\n", "0: kubelet 1 2\n1: kubelet 3 4\n",
                "0: kubelet 4294967296 65536\n"):
        with pytest.raises(UserNamespaceError):
            parse_getsubids(bad)


def test_the_id_range_is_the_kubelet_users_subordinate_ids_or_all_above_the_first_block():
    calls = []

    def run(argv):
        calls.append(argv)
        return "0: kubelet 131072 655360\n"

    assert kubelet_id_range(UNIT, run, has_user=lambda name: False, getsubids="/usr/bin/getsubids") == DEFAULT
    assert kubelet_id_range(UNIT, run, has_user=lambda name: True, getsubids="") == DEFAULT, "no getsubids"
    assert calls == []
    assert kubelet_id_range(UNIT, run, has_user=lambda name: name == "kubelet", getsubids="/usr/bin/getsubids") \
        == IdRange(131072, 655360)
    assert calls == [["/usr/bin/getsubids", "kubelet"], ["/usr/bin/getsubids", "-g", "kubelet"]]
    with pytest.raises(UserNamespaceError, match="subordinate UIDs and GIDs of user 'kubelet' differ"):
        kubelet_id_range(UNIT, lambda argv: "0: kubelet 131072 655360\n" if "-g" in argv else "0: kubelet 65536 65536\n",
                         has_user=lambda name: True, getsubids="/usr/bin/getsubids")


@pytest.mark.parametrize("ids_per_pod, ids, max_pods, words", [
    (100000, DEFAULT, 110, "kubelet user namespace length 100000 is not a multiple of 65536"),
    (UNIT, IdRange(100000, 10 * UNIT), 5, "kubelet user assigned ID 100000 is not a multiple of 65536"),
    (UNIT, IdRange(0, 10 * UNIT), 5, "kubelet user assigned ID 0 must be greater or equal to 65536"),
    (UNIT, IdRange(UNIT, 10 * UNIT + 1), 5, "is not a multiple of 65536"),
    (UNIT, IdRange(UNIT, 10 * UNIT), 110, "kubelet user assigned IDs are not enough to support 110 pods"),
])
def test_a_range_that_cannot_hold_the_pods_is_refused_in_the_kubelets_words(tmp_path, ids_per_pod, ids, max_pods,
                                                                            words):
    with pytest.raises(UserNamespaceError, match=words):
        UserNamespaces(tmp_path, ids_per_pod, ids, max_pods)


def test_each_pod_gets_its_own_block_written_in_the_kubelets_file(tmp_path):
    ns = UserNamespaces(tmp_path, UNIT, IdRange(2 * UNIT, 4 * UNIT), max_pods=4)
    firsts = [ns.first_id(f"pod-{i}") for i in range(4)]
    assert firsts == [2 * UNIT, 3 * UNIT, 4 * UNIT, 5 * UNIT]
    assert ns.first_id("pod-1") == 3 * UNIT, "asked again: the same block"
    mapping = [{"hostId": 3 * UNIT, "containerId": 0, "length": UNIT}]
    assert json.loads((tmp_path / "pod-1" / "userns").read_text()) == {"uidMappings": mapping,
                                                                        "gidMappings": mapping}
    with pytest.raises(UserNamespaceError, match="could not find an empty slot"):
        ns.first_id("pod-5")
    ns.release("pod-1")
    assert not (tmp_path / "pod-1" / "userns").exists()
    assert ns.first_id("pod-5") == 3 * UNIT, "a freed block is given again"


def test_a_restart_gives_every_pod_the_block_it_had(tmp_path):
    before = UserNamespaces(tmp_path, UNIT, DEFAULT, max_pods=110)
    had = {uid: before.first_id(uid) for uid in ("a", "b", "c")}
    before.release("b")
    after = UserNamespaces(tmp_path, UNIT, DEFAULT, max_pods=110)
    after.recover()
    assert after.allocated == {"a": had["a"], "c": had["c"]}
    assert after.first_id("d") not in (had["a"], had["c"]), "a new pod never gets a block in use"


def test_files_that_are_not_the_kubelets_are_refused_and_do_not_stop_the_others(tmp_path):
    good = UserNamespaces(tmp_path, UNIT, DEFAULT, max_pods=110)
    first = good.first_id("good")
    for uid, text in {"garbage": "{not json", "two": json.dumps({"uidMappings": [1, 2], "gidMappings": [1, 2]}),
                      "outside": _file(7, UNIT), "unaligned": _file(UNIT + 1, UNIT), "length": _file(2 * UNIT, 10),
                      "taken": _file(first, UNIT)}.items():
        (tmp_path / uid).mkdir()
        (tmp_path / uid / "userns").write_text(text)
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "userns").symlink_to(tmp_path / "good" / "userns")
    again = UserNamespaces(tmp_path, UNIT, DEFAULT, max_pods=110)
    again.recover()
    assert again.allocated == {"good": first}, "only the valid file counts; a symlink is not followed"
    with pytest.raises(UserNamespaceError, match="invalid user namespace mappings file"):
        again.first_id("garbage")
    with pytest.raises(UserNamespaceError, match="outside the node's user namespace IDs"):
        again.first_id("outside")
    with pytest.raises(UserNamespaceError, match="is not a pod UID"):
        again.first_id("../escape")


def _file(host_id, length):
    mapping = [{"hostId": host_id, "containerId": 0, "length": length}]
    return json.dumps({"uidMappings": mapping, "gidMappings": mapping})


def test_blocks_of_pods_gone_are_freed(tmp_path):
    ns = UserNamespaces(tmp_path, UNIT, DEFAULT, max_pods=110)
    for uid in ("kept", "running", "gone"):
        ns.first_id(uid)
    ns.release_all_but({"kept", "running"})
    assert set(ns.allocated) == {"kept", "running"}
    assert not (tmp_path / "gone" / "userns").exists()


# -- pod-sync ------------------------------------------------------------------------------------


def userns_pod(uid="uid1", **spec):
    return manifest(uid=uid, hostUsers=False, containers=[
        {"name": "app", "image": IMG, "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        volumes=[{"name": "data", "emptyDir": {}}], **spec)


def ready_volume(settings, uid="uid1"):
    from shared.store import PodVolume, Store

    vol = Store(settings.store_path, writer="volume")
    with vol.session() as s:
        s.merge(PodVolume(pod_uid=uid, name="data", plugin="kubernetes.io/empty-dir", host_path=f"/v/{uid}",
                          ready=True))
    vol.close()


async def test_a_pod_with_host_users_false_runs_in_its_own_user_namespace(syncer, rt, store, settings):
    rt.handlers = [("", True, True)]
    for uid in ("uid1", "uid2"):
        want(store, userns_pod(uid))
        ready_volume(settings, uid)
        await syncer.sync(uid)
    mappings = []
    for sid, sandbox in rt.sandbox_configs.items():
        userns = sandbox.linux.security_context.namespace_options.userns_options
        assert userns.mode == cri.POD
        assert [(m.container_id, m.length) for m in userns.uids] == [(0, UNIT)] and userns.uids == userns.gids
        mappings.append(userns.uids[0].host_id)
        [config] = [c for cid, c in rt.created_configs.items() if rt.container_sandbox[cid] == sid]
        assert config.linux.security_context.namespace_options.userns_options == userns, "containers join it"
        data = next(m for m in config.mounts if m.container_path == "/data")
        assert list(data.uidMappings) == list(userns.uids) and list(data.gidMappings) == list(userns.gids), \
            "volumes are mounted ID-mapped"
    assert len(set(mappings)) == 2 and min(mappings) >= UNIT, "each pod its own IDs, none of the host's first block"
    asked = len(rt.ops("status"))
    await syncer.sync("uid1")
    assert len(rt.ops("status")) == asked, "a pod that runs as it should costs no runtime status call"
    # A pod without hostUsers: false stays in the node's namespace.
    want(store, manifest(uid="uid3"))
    await syncer.sync("uid3")
    [plain] = [c for sid, c in rt.sandbox_configs.items() if c.metadata.uid == "uid3"]
    assert not plain.linux.security_context.namespace_options.HasField("userns_options")


async def test_a_restarted_pod_sync_gives_the_pod_the_same_ids(syncer, rt, store, settings, node, events):
    rt.handlers = [("", True, True)]
    want(store, userns_pod())
    ready_volume(settings)
    await syncer.sync("uid1")
    [first] = rt.sandbox_configs.values()
    restarted = PodSyncer(rt, ImageManager(rt, Backoff(10, 300)), store, settings, Backoff(10, 300), node, events,
                          subpaths=FakeSubPathMounts())
    assert restarted.user_namespaces.allocated == {"uid1": first.linux.security_context.namespace_options
                                                   .userns_options.uids[0].host_id}


async def test_a_runtime_without_user_namespaces_holds_the_sandbox_in_the_kubelets_words(syncer, rt, store,
                                                                                         settings, events):
    rt.handlers = [("", True, False)]
    want(store, userns_pod())
    ready_volume(settings)
    await syncer.sync("uid1")
    assert rt.sandboxes == {}
    row = observed(store)
    assert row.sync_error_reason == "FailedCreatePodSandBox"
    assert row.sync_error_message.endswith(
        "can't set `spec.hostUsers: false`, runtime does not support user namespaces")
    assert ("Warning", "FailedCreatePodSandBox", "Failed to create pod sandbox: can't set `spec.hostUsers: false`, "
            "runtime does not support user namespaces") in events.events
    assert syncer.user_namespaces.allocated == {}, "no IDs taken for a sandbox that was not made"


async def test_ids_per_pod_sets_each_pods_mapping_length(rt, store, settings, node, events):
    configured = NodeSettings(kubelet=KubeletConfiguration.model_validate(
        {**settings.kubelet.model_dump(by_alias=True), "userNamespaces": {"idsPerPod": 2 * UNIT}}),
        root_dir=settings.root_dir, node_name="node1")
    syncer = PodSyncer(rt, ImageManager(rt, Backoff(10, 300)), store, configured, Backoff(10, 300), node, events,
                       subpaths=FakeSubPathMounts())
    rt.handlers = [("", True, True)]
    want(store, userns_pod())
    ready_volume(settings)
    await syncer.sync("uid1")
    [sandbox] = rt.sandbox_configs.values()
    [mapping] = sandbox.linux.security_context.namespace_options.userns_options.uids
    assert (mapping.length, mapping.host_id % (2 * UNIT), mapping.host_id >= 2 * UNIT) == (2 * UNIT, 0, True)


@pytest.mark.parametrize("ids, words", [
    (1000, "userNamespaces.idsPerPod must not be less than 65536"),
    (UNIT + 1, "userNamespaces.idsPerPod must be a multiple of 65536"),
    (2**32, "userNamespaces.idsPerPod must not be more than 4294967295"),
])
def test_ids_per_pod_is_validated_in_the_kubelets_words(ids, words):
    with pytest.raises(ValueError, match=words):
        KubeletConfiguration.model_validate({"userNamespaces": {"idsPerPod": ids}})


def started() -> tuple[float, ...]:
    from services.pod_sync import metrics as M

    return tuple(c._value.get() for c in (M.STARTED_PODS, M.STARTED_POD_ERRORS, M.STARTED_USERNS_PODS,
                                          M.STARTED_USERNS_POD_ERRORS))


async def test_pod_starts_are_counted_as_the_kubelet_counts_them(syncer, rt, store, settings):
    def delta(before):
        return tuple(after - b for after, b in zip(started(), before, strict=True))

    rt.handlers = [("", True, True)]
    before = started()
    want(store, manifest(uid="plain"))
    await syncer.sync("plain")
    assert delta(before) == (1, 0, 0, 0)
    before = started()
    want(store, userns_pod())
    ready_volume(settings)
    await syncer.sync("uid1")
    await syncer.sync("uid1")  # running: nothing new is started, nothing counted
    assert delta(before) == (1, 0, 1, 0)
    before = started()
    rt.pull_errors["reg/bogus:1"] = "not found"  # the sandbox is made, the container is not
    want(store, userns_pod("uid2", initContainers=[{"name": "bad", "image": "reg/bogus:1"}]))
    ready_volume(settings, "uid2")
    await syncer.sync("uid2")
    assert delta(before) == (1, 0, 1, 1), "a user namespaced pod whose sync failed anywhere is an error"
    before = started()
    rt.handlers = [("", True, False)]
    want(store, userns_pod("uid3"))
    ready_volume(settings, "uid3")
    await syncer.sync("uid3")
    assert delta(before) == (1, 1, 1, 1), "no sandbox: a pod start error"
