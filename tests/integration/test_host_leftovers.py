"""The session's pre-flight on a real bridge: the network namespaces of a killed run go, a live
node's stay and are named (tests/host_leftovers.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.host_leftovers import clear_bridge

BRIDGE, ORPHAN, LIVE = "pkltest0", "pkltest-orphan", "pkltest-live"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def attach(netns: str, host_end: str) -> None:
    """A pod's network as the bridge plugin makes it: a veth pair, one end on the bridge."""
    ip("netns", "add", netns)
    ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", netns)
    ip("link", "set", host_end, "master", BRIDGE, "up")


@pytest.fixture
def bridge():
    if os.geteuid() != 0:
        pytest.fail("this test makes a bridge and network namespaces and needs root")
    ip("link", "add", BRIDGE, "type", "bridge")
    sleeper = None
    try:
        attach(ORPHAN, "pkltest-veth1")
        attach(LIVE, "pkltest-veth2")
        sleeper = subprocess.Popen(["ip", "netns", "exec", LIVE, "sleep", "120"])
        yield sleeper
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait(timeout=10)
        for netns in (ORPHAN, LIVE):
            subprocess.run(["ip", "netns", "delete", netns], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, timeout=10)


def ports() -> list[str]:
    return sorted(os.listdir(f"/sys/class/net/{BRIDGE}/brif"))


def test_a_killed_runs_namespaces_go_and_a_live_nodes_stay(bridge):
    assert ports() == ["pkltest-veth1", "pkltest-veth2"]
    found = clear_bridge(BRIDGE)
    assert found.removed == [ORPHAN]
    assert not Path(f"/run/netns/{ORPHAN}").exists()
    assert found.stuck == []
    assert ports() == ["pkltest-veth2"], "the orphan's veth pair went with its namespace"
    assert found.live == {LIVE: [bridge.pid]}
    assert clear_bridge(BRIDGE).removed == [], "nothing more to remove the second time"


def test_a_bridge_without_ports_or_that_does_not_exist_needs_nothing():
    assert clear_bridge("pkltest-none").removed == [] and clear_bridge("pkltest-none").live == {}
