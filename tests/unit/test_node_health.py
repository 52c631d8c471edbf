"""pod-sync's record of the runtime's health (services/pod_sync/node_health.py): asked every
5 s, written when it changes or to stay fresh, never a commit saying the same thing every time."""

from __future__ import annotations

import asyncio

import grpc

from services.pod_sync import node_health
from services.pod_sync.node_health import NodeHealthWriter
from shared.runtime.cri import CRIError
from shared.runtime.cri.fake import FakeRuntime
from shared.store import NodeHealth, Store


class FlakyRuntime(FakeRuntime):
    down = False

    async def status(self):
        if self.down:
            raise CRIError("Status", grpc.StatusCode.UNAVAILABLE, "connection refused")
        return await super().status()


def row(store: Store) -> NodeHealth:
    with store.session() as s:
        h = s.get(NodeHealth, 1)
        assert h is not None
        return h


async def test_health_is_written_on_change_and_refreshed_not_rewritten_each_check(tmp_path, monkeypatch):
    store = Store(tmp_path / "state.db", writer="pod-sync")
    store.create_schema()
    rt = FlakyRuntime()
    pleg = [(True, "")]
    writer = NodeHealthWriter(rt, store, lambda: pleg[0])

    await writer.write_once()
    first = row(store)
    assert (first.runtime_ready, first.runtime_version, first.pleg_healthy) == (True, "fake://1.0", True)
    assert (first.network_ready, first.network_message) == (True, "")
    await writer.write_once()
    assert row(store).updated_at == first.updated_at, "nothing changed: no new commit"
    assert len(rt.ops("version")) == 1, "the runtime's version is asked once while it answers"

    pleg[0] = (False, "pleg was last seen active 3m ago")
    await writer.write_once()
    assert (row(store).pleg_healthy, row(store).pleg_message) == (False, "pleg was last seen active 3m ago")

    rt.down = True
    await writer.write_once()
    down = row(store)
    assert not down.runtime_ready and "container runtime is down" in down.runtime_message
    assert not down.network_ready and down.network_message == down.runtime_message
    assert writer.runtime_ready() == (False, down.runtime_message)
    rt.down = False
    await writer.write_once()
    assert row(store).runtime_ready and row(store).runtime_version == "fake://1.0"
    assert len(rt.ops("version")) == 2, "asked again after the runtime failed: it may be a new one"

    monkeypatch.setattr(node_health, "REFRESH", 0.0)
    before = row(store).updated_at
    await writer.write_once()
    assert row(store).updated_at > before, "rewritten to stay fresh for status-reporter"


async def test_runtime_handlers_and_features_reach_the_node_status_as_the_kubelet_reports_them(tmp_path):
    from services.status_reporter.node_object import runtime_facts

    store = Store(tmp_path / "state.db", writer="pod-sync")
    store.create_schema()
    rt = FakeRuntime()
    writer = NodeHealthWriter(rt, store, lambda: (True, ""))
    await writer.write_once()
    assert runtime_facts(row(store)) == {"images": None}, "containerd 1.x reports neither: the kubelet leaves both out"

    rt.handlers = [("", True, False), ("runc", True, True)]
    rt.supplemental_groups_policy = True
    await writer.write_once()
    assert runtime_facts(row(store)) == {
        "runtimeHandlers": [{"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}},
                            {"name": "runc", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}}],
        "features": {"supplementalGroupsPolicy": True}, "images": None}


def test_runtime_facts_send_on_only_what_pod_sync_can_have_written():
    from services.status_reporter.node_object import runtime_facts

    garbage = NodeHealth(runtime_handlers='[{"name": "x", "features": {"evil": "yes", "userNamespaces": 1}}, 3]',
                         runtime_features='{"supplementalGroupsPolicy": "", "more": 1}',
                         images='[{"names": ["a:1", 7], "sizeBytes": 5, "evil": 1}, {"sizeBytes": "x"}, 3]')
    assert runtime_facts(garbage) == {"runtimeHandlers": [{"name": "x", "features": {"userNamespaces": True}}],
                                      "features": {"supplementalGroupsPolicy": False},
                                      "images": [{"names": ["a:1"], "sizeBytes": 5}]}
    assert runtime_facts(NodeHealth(runtime_handlers="{not json", runtime_features="", images="{")) == {"images": None}


async def test_the_nodes_images_are_listed_largest_first_up_to_node_status_max_images(tmp_path):
    """status.images as the kubelet's: every image the runtime has, largest first, its digests
    then its tags (five names at most); nodeStatusMaxImages of them (-1 all, 0 none: the field
    is removed)."""
    from cri_api.v1 import api_pb2 as cri

    from services.pod_sync import node_health
    from services.status_reporter.node_object import runtime_facts

    images = [cri.Image(id="sha256:small", repo_tags=["r/small:1"], size=10),
              cri.Image(id="sha256:big", repo_tags=[f"r/big:{i}" for i in range(6)],
                        repo_digests=["r/big@sha256:d"], size=1000),
              cri.Image(id="sha256:mid", repo_tags=["r/mid:1"], size=100)]
    listed = node_health.node_images(images)
    recorded = NodeHealth(images=listed)
    assert runtime_facts(recorded)["images"] == [
        {"names": ["r/big@sha256:d", "r/big:0", "r/big:1", "r/big:2", "r/big:3"], "sizeBytes": 1000},
        {"names": ["r/mid:1"], "sizeBytes": 100}, {"names": ["r/small:1"], "sizeBytes": 10}]
    assert [i["sizeBytes"] for i in runtime_facts(recorded, 2)["images"]] == [1000, 100]
    assert len(runtime_facts(recorded, -1)["images"]) == 3
    assert runtime_facts(recorded, 0)["images"] is None

    # The writer records them, and again at once when told an image came or went.
    store = Store(tmp_path / "state.db", writer="pod-sync")
    store.create_schema()
    rt = FakeRuntime()
    rt.images = {"r/one:1": "sha256:one"}
    writer = NodeHealthWriter(rt, store, lambda: (True, ""))
    task = asyncio.create_task(writer.run())
    try:
        await asyncio.sleep(0.2)
        assert [i["names"] for i in runtime_facts(row(store))["images"]] == [["r/one:1"]]
        rt.images["r/two:1"] = "sha256:two"
        writer.images_changed()
        await asyncio.sleep(0.2)  # much less than the 5 s period
        assert sorted(n for i in runtime_facts(row(store))["images"] for n in i["names"]) == ["r/one:1", "r/two:1"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
