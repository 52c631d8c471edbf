"""The node's own trust boundaries: its bus refuses strangers and holds each service to its own
subjects, a forged event with path-like pod UIDs is dropped, and its files keep the kubelet's modes."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import nats
import pytest

from shared.bus.auth import read_credentials
from shared.bus.messages import DesiredPodsChanged, PodStatusChanged
from shared.process.admin import SERVICES
from tests.integration.conftest import wait_for


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _bus_url(node) -> str:
    port = next(line.split(":")[-1].strip() for line in (node.root / "bus" / "nats.conf").read_text().splitlines()
                if line.startswith("listen:"))
    return f"nats://127.0.0.1:{port}"


def test_the_bus_refuses_anonymous_clients_and_keeps_credentials_private(node):
    bus_dir = node.root / "bus"
    assert _mode(bus_dir) == 0o700
    for f in bus_dir.iterdir():
        assert _mode(f) == 0o600, f"{f} is readable by others"
    assert {f.name for f in bus_dir.glob("*.json")} == {f"{s}.json" for s in SERVICES}

    async def anonymous():
        await asyncio.wait_for(nats.connect(_bus_url(node), allow_reconnect=False, connect_timeout=2), 5)
    with pytest.raises(Exception, match="(?i)authorization"):
        asyncio.run(anonymous())


def test_forged_events_change_nothing(pods, canary):
    """With pod-sync's own credentials (the worst case: a stolen file): path-like UIDs on its
    subject are dropped by every reader; another service's subject is refused by the server."""
    pods.write_pod("bystander", {"containers": [{"name": "app", "image": pods.image("busybox"),
                                                 "command": ["sleep", "3600"]}]})
    before = pods.wait_running("bystander")
    creds = read_credentials(pods.root / "bus" / "pod-sync.json")
    errors: list[str] = []

    async def forge():
        async def on_error(exc):
            errors.append(str(exc))
        nc = await nats.connect(_bus_url(pods), user=creds.user, password=creds.password, allow_reconnect=False,
                                connect_timeout=2, error_cb=on_error)
        try:
            for uids in ([f"../../../..{canary.dir}"], [str(canary.dir)], ["..", "."], [before["uid"], "/"]):
                await nc.publish(DesiredPodsChanged.subject, json.dumps({"uids": uids}).encode())
            await nc.publish(DesiredPodsChanged.subject, b"\xff not json")
            await nc.publish(PodStatusChanged.subject, json.dumps({"uids": [before["uid"]]}).encode())
            await nc.flush(timeout=5)
            await asyncio.sleep(1.0)
        finally:
            await nc.close()
    asyncio.run(forge())
    assert any("permissions violation" in e.lower() for e in errors), errors
    for service in SERVICES:
        wait_for(lambda service=service: pods.admin_get(service, "/readyz", timeout=2).status_code == 200, 20,
                 f"{service} answers ready")
    after = pods.wait_running("bystander")
    assert after["uid"] == before["uid"]
    assert [c["containerID"] for c in after["containers"]] == [c["containerID"] for c in before["containers"]]


def test_the_node_keeps_its_files_private(pods):
    pods.write_pod("private", {"containers": [{"name": "app", "image": pods.image("busybox"),
                                               "command": ["sleep", "3600"]}],
                               "volumes": [{"name": "s", "emptyDir": {}}]})
    pod = pods.wait_running("private")
    root = pods.root
    assert _mode(root) & 0o066 == 0, "others may pass through the root dir (0711), never list it or write"
    assert _mode(root / "pods") == 0o750
    assert _mode(root / "pods" / pod["uid"]) == 0o750
    assert _mode(root / "state.db") == 0o600, "the store holds whole manifests, env values included"
