"""The event bus against a real nats-server on a free port."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from shared.bus.auth import write_credentials, write_server_config
from shared.bus.client import Bus
from shared.bus.messages import DesiredPodsChanged, NetworkChanged, ProbeResultsChanged
from tests.integration.conftest import free_port


class NatsServer:
    def __init__(self, port: int, config: Path | None = None) -> None:
        """config: a nats-server config file (it names the port); None: no authorization."""
        self.port = port
        self.config = config
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        if shutil.which("nats-server") is None:
            pytest.fail("nats-server is not installed; `make deps` installs it")
        argv = ["-c", str(self.config)] if self.config else ["-a", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen(["nats-server", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import socket

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        pytest.fail(f"nats-server did not listen on {self.port} within 10s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def secured_bus(tmp_path):
    """A nats-server with the node's authorization: a user per service, publish permissions."""
    port = free_port()
    users = write_credentials(tmp_path / "bus", ["pod-sync", "probe", "node-api"])
    server = NatsServer(port, write_server_config(tmp_path / "bus" / "nats.conf", port, users))
    server.start()
    yield server, users
    server.stop()


@pytest.fixture
def nats_server():
    server = NatsServer(free_port())
    server.start()
    yield server
    server.stop()


async def test_typed_events_round_trip(nats_server):
    a, b = Bus(nats_server.url, "a"), Bus(nats_server.url, "b")
    await a.connect(5)
    await b.connect(5)
    got: asyncio.Queue = asyncio.Queue()
    await b.subscribe(DesiredPodsChanged, got.put)
    await asyncio.sleep(0.1)
    await a.publish(DesiredPodsChanged(uids=["u1", "u2"]))
    event = await asyncio.wait_for(got.get(), 5)
    assert isinstance(event, DesiredPodsChanged) and event.uids == ["u1", "u2"]
    assert DesiredPodsChanged.subject == "pykubelet.v1.pods.desired"
    await a.close()
    await b.close()


async def first_event_after(nats_server, event_type, payloads: list[bytes]):
    """Publish raw payloads on the event's subject; return the first one a Bus delivers, and
    whether anything else was delivered."""
    import nats

    bus = Bus(nats_server.url, "b")
    await bus.connect(5)
    got: asyncio.Queue = asyncio.Queue()
    await bus.subscribe(event_type, got.put)
    raw = await nats.connect(nats_server.url)
    for payload in payloads:
        await raw.publish(event_type.subject, payload)
    await raw.flush()
    try:
        return await asyncio.wait_for(got.get(), 5), not got.empty()
    finally:
        await raw.close()
        await bus.close()


async def test_garbage_on_a_subject_is_dropped_and_the_next_event_arrives(nats_server):
    event, more = await first_event_after(nats_server, NetworkChanged,
                                          [b"\x00not json", b'{"ready": "maybe"}', b'{"ready": true}'])
    assert event.ready is True and not more


async def test_path_like_pod_uids_in_a_payload_drop_the_message(nats_server):
    bad = [json.dumps({"uids": ["fine", uid]}).encode() for uid in ("../../etc", "/etc", "..", "a/b", "x" * 200)]
    good = "0b9f6c1e-4f2a-4c55-9d6b-1f0e2a3b4c5d"
    event, more = await first_event_after(nats_server, DesiredPodsChanged, [*bad, json.dumps({"uids": [good]}).encode()])
    assert event.uids == [good] and not more


async def test_bus_survives_a_nats_restart(nats_server):
    bus, sender = Bus(nats_server.url, "b"), Bus(nats_server.url, "s")
    await bus.connect(5)
    await sender.connect(5)
    got: asyncio.Queue = asyncio.Queue()
    await bus.subscribe(DesiredPodsChanged, got.put)
    nats_server.stop()
    await asyncio.sleep(0.5)
    assert not bus.connected
    nats_server.start()
    deadline = time.monotonic() + 15
    while not (bus.connected and sender.connected) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert bus.connected and sender.connected, "did not reconnect after nats-server came back"
    await asyncio.sleep(0.2)  # subscriptions are replayed on reconnect
    await sender.publish(DesiredPodsChanged(uids=["after"]))
    assert (await asyncio.wait_for(got.get(), 5)).uids == ["after"]
    await bus.close()
    await sender.close()


async def test_connect_to_nothing_fails_with_advice():
    bus = Bus(f"nats://127.0.0.1:{free_port()}", "x")
    with pytest.raises(ConnectionError, match="Is nats-server running"):
        await bus.connect(timeout=1.5)


async def test_anonymous_and_wrong_password_connections_are_refused(secured_bus):
    import nats

    server, users = secured_bus
    with pytest.raises(Exception, match="(?i)authorization"):
        await asyncio.wait_for(nats.connect(server.url, allow_reconnect=False, connect_timeout=2), 5)
    thief = Bus(server.url, "pykubelet-probe", user="probe", password="guess")
    with pytest.raises(ConnectionError, match="refused pykubelet-probe's credentials"):
        await thief.connect(timeout=2)


async def test_a_service_publishes_only_the_subjects_it_owns(secured_bus):
    server, users = secured_bus

    def bus(service: str) -> Bus:
        return Bus(server.url, f"pykubelet-{service}", user=service, password=users[service].password)
    podsync, probe, nodeapi = bus("pod-sync"), bus("probe"), bus("node-api")
    for b in (podsync, probe, nodeapi):
        await b.connect(timeout=5)
    got: list = []

    async def record(event) -> None:
        got.append(event)
    await podsync.subscribe(ProbeResultsChanged, record)
    await podsync.subscribe(DesiredPodsChanged, record)
    await probe.publish(ProbeResultsChanged(uids=["ok"]))  # probe's own subject
    await probe.publish(DesiredPodsChanged(uids=["forged"]))  # pod-sync's: refused by the server
    await nodeapi.publish(ProbeResultsChanged(uids=["forged"]))  # node-api publishes only the log verbosity
    await asyncio.sleep(1.0)
    assert [(type(e).__name__, e.uids) for e in got] == [("ProbeResultsChanged", ["ok"])]
    for b in (podsync, probe, nodeapi):
        await b.close()
