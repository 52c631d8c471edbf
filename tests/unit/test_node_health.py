"""pod-sync's record of the runtime's health (services/pod_sync/node_health.py): asked every
5 s, written when it changes or to stay fresh, never a commit saying the same thing every time."""

from __future__ import annotations

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
    assert runtime_facts(row(store)) == {}, "containerd 1.x reports neither: the kubelet leaves both out"

    rt.handlers = [("", True, False), ("runc", True, True)]
    rt.supplemental_groups_policy = True
    await writer.write_once()
    assert runtime_facts(row(store)) == {
        "runtimeHandlers": [{"name": "", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": False}},
                            {"name": "runc", "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}}],
        "features": {"supplementalGroupsPolicy": True}}


def test_runtime_facts_send_on_only_what_pod_sync_can_have_written():
    from services.status_reporter.node_object import runtime_facts

    garbage = NodeHealth(runtime_handlers='[{"name": "x", "features": {"evil": "yes", "userNamespaces": 1}}, 3]',
                         runtime_features='{"supplementalGroupsPolicy": "", "more": 1}')
    assert runtime_facts(garbage) == {"runtimeHandlers": [{"name": "x", "features": {"userNamespaces": True}}],
                                      "features": {"supplementalGroupsPolicy": False}}
    assert runtime_facts(NodeHealth(runtime_handlers="{not json", runtime_features="")) == {}
