"""The network service's readiness loop: the store is written when what it says changes, not at
every poll (an idle node commits nothing for it), and every change is published."""

from __future__ import annotations

from services.network.readiness import NetworkManager
from shared.bus import NetworkChanged
from shared.cri.fake import FakeRuntime
from shared.runtime_check import RuntimeHealth
from shared.store import NetworkStatus, Store


class RecordingBus:
    def __init__(self) -> None:
        self.published: list = []

    async def publish(self, event) -> None:
        self.published.append(event)


def row(store: Store) -> tuple:
    with store.session() as s:
        r = s.get(NetworkStatus, 1)
        return r.ready, r.message, r.updated_at


async def test_the_store_is_written_only_when_the_network_state_changes(tmp_path):
    store = Store(tmp_path / "state.db", writer="network")
    store.create_schema()
    runtime, bus = FakeRuntime(), RecordingBus()
    manager = NetworkManager(store, bus, RuntimeHealth(runtime), "10.88.0.0/24", tmp_path)

    await manager.reconcile()
    first = row(store)
    assert first[0] is True and first[1] == "ok"
    for _ in range(3):
        await manager.reconcile()
    assert row(store) == first, "nothing changed: no new write"
    assert sum(op == "status" for op, _ in runtime.calls) == 4, "the runtime is still asked every time"

    runtime.network_ready = False
    await manager.reconcile()
    ready, message, _ = row(store)
    assert not ready and "NetworkPluginNotReady" in message
    assert [e.ready for e in bus.published if isinstance(e, NetworkChanged)] == [True, False]
    assert manager.ready() == (False, message)
