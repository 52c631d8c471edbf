"""The network service's readiness loop: the runtime's NetworkReady condition as pod-sync records
it, the store written when what it says changes, not at every look (an idle node commits nothing
for it), and every change published."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from services.network.readiness import NetworkManager
from services.pod_sync.node_health import NodeHealthWriter
from shared.bus.messages import NetworkChanged, RuntimeStatusChanged
from shared.runtime.cri.fake import FakeRuntime
from shared.store import NetworkStatus, NodeHealth, Store
from shared.store.models import utcnow
from shared.store.runtime_status import runtime_network


class RecordingBus:
    def __init__(self) -> None:
        self.published: list = []

    async def publish(self, event) -> None:
        self.published.append(event)


def row(store: Store) -> tuple:
    with store.session() as s:
        r = s.get(NetworkStatus, 1)
        return r.ready, r.message, r.updated_at


async def test_network_follows_the_runtime_status_pod_sync_records(tmp_path):
    db = tmp_path / "state.db"
    Store(db, writer=None).create_schema()
    runtime, pod_sync_bus, bus = FakeRuntime(), RecordingBus(), RecordingBus()
    health = NodeHealthWriter(runtime, Store(db, writer="pod-sync"), lambda: (True, ""), pod_sync_bus)
    store = Store(db, writer="network")
    manager = NetworkManager(store, bus, lambda: runtime_network(store), "10.88.0.0/24", tmp_path)

    await manager.reconcile()
    assert row(store)[:2] == (False, "container runtime network not ready: pod-sync has not reported the "
                                     "container runtime's status yet")

    await health.write_once()
    assert [type(e) for e in pod_sync_bus.published] == [RuntimeStatusChanged]
    await manager.reconcile()
    first = row(store)
    assert first[:2] == (True, "ok")
    for _ in range(3):
        await health.write_once()
        await manager.reconcile()
    assert row(store) == first, "nothing changed: no new write"
    assert len(pod_sync_bus.published) == 1, "an unchanged runtime status is not announced again"
    assert sum(op == "status" for op, _ in runtime.calls) == 4, "the runtime is asked by pod-sync only"

    runtime.network_ready = False
    await health.write_once()
    assert len(pod_sync_bus.published) == 2
    await manager.reconcile()
    ready, message, _ = row(store)
    assert not ready and message == "container runtime network not ready: NetworkPluginNotReady"
    assert [e.ready for e in bus.published if isinstance(e, NetworkChanged)] == [False, True, False]
    assert manager.ready() == (False, message)


async def test_a_runtime_status_pod_sync_stopped_recording_is_not_trusted(tmp_path):
    db = tmp_path / "state.db"
    Store(db, writer=None).create_schema()
    pod_sync = Store(db, writer="pod-sync")
    pod_sync.upsert(NodeHealth, {"id": 1}, {"runtime_ready": True, "network_ready": True,
                                            "updated_at": utcnow() - timedelta(seconds=45)})
    ready, why = runtime_network(Store(db, writer=None))
    assert not ready and "pod-sync has not reported the container runtime's status for 45s" == why


async def test_a_runtime_status_event_wakes_the_loop_at_once(tmp_path):
    db = tmp_path / "state.db"
    Store(db, writer=None).create_schema()
    answers = [(False, "NetworkPluginNotReady: cni config uninitialized")]
    store = Store(db, writer="network")
    manager = NetworkManager(store, RecordingBus(), lambda: answers[-1], "10.88.0.0/24", tmp_path,
                             period=60, not_ready_period=60)
    loop = asyncio.create_task(manager.run())
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if manager.ready()[1] != "not reconciled yet":
                break
        assert manager.ready()[0] is False
        answers.append((True, "ok"))
        manager.wake.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if manager.ready()[0]:
                break
        assert manager.ready() == (True, "ok"), "woken, not after its 60 s period"
    finally:
        loop.cancel()


async def test_a_runtime_reading_a_cni_agents_directory_gets_no_config_from_pykubelet(tmp_path):
    from services.network.runtime_cni import RuntimeCNI
    from shared.host.cni import CONFLIST_NAME, cni_conf_dir

    db = tmp_path / "state.db"
    Store(db, writer=None).create_schema()
    runtime = FakeRuntime()
    agent = tmp_path / "etc-cni-net.d"
    agent.mkdir()
    runtime.cni_conf_dir = str(agent)
    clock = [0.0]
    answers = [(False, "NetworkPluginNotReady: cni plugin not initialized")]
    store = Store(db, writer="network")
    manager = NetworkManager(store, RecordingBus(), lambda: answers[-1], "10.88.0.0/24", tmp_path,
                             runtime_cni=RuntimeCNI(runtime, cni_conf_dir(tmp_path), clock=lambda: clock[0]))
    await manager.reconcile()
    assert not (cni_conf_dir(tmp_path) / CONFLIST_NAME).exists(), "no network of pykubelet's beside the agent's"
    with store.session() as s:
        r = s.get(NetworkStatus, 1)
        assert (r.ready, r.reason, r.conf_path) == (False, "NetworkPluginNotReady", "")
        assert r.message == ("container runtime network not ready: NetworkPluginNotReady: cni plugin not initialized "
                             f"(the runtime reads CNI configs from {agent}: the network is the one a CNI agent "
                             "writes there, none is there yet)")

    # The agent writes its config (a 10-* sorts before a 99-*: libcni's choice, and so ours).
    (agent / "99-other.conf").write_text("{}")
    (agent / "10-agent.conflist").write_text("{}")
    (agent / "README").write_text("not a config")
    answers.append((True, "ok"))
    await manager.reconcile()
    with store.session() as s:
        r = s.get(NetworkStatus, 1)
        assert (r.ready, r.message, r.conf_path) == (True, "ok", str(agent / "10-agent.conflist"))
    assert sum(op == "status" for op, _ in runtime.calls) == 1, "the runtime's config is asked once per period"

    # The runtime now reads pykubelet's own directory: pykubelet's bridge network again.
    runtime.cni_conf_dir = str(cni_conf_dir(tmp_path))
    clock[0] += 31
    await manager.reconcile()
    assert (cni_conf_dir(tmp_path) / CONFLIST_NAME).exists()


def test_hairpin_mode_none_writes_the_bridge_without_hairpin_ports(tmp_path):
    """hairpinMode: promiscuous-bridge (the default) and hairpin-veth put each pod's bridge port
    in hairpin mode (the bridge plugin's hairpinMode), none does not."""
    import json

    from services.network.cni_config import write_conflist

    for hairpin in (True, False):
        path, changed = write_conflist(tmp_path / str(hairpin), "10.88.0.0/24", tmp_path / "ipam", hairpin)
        bridge = json.loads(path.read_text())["plugins"][0]
        assert changed and bridge["type"] == "bridge" and bridge["hairpinMode"] is hairpin
