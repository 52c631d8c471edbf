"""Pod networks a killed test run left on this host, found (and the dead ones removed) before a
session starts its nodes.

Every test node puts its pods on the same host bridge (shared.host.cni.BRIDGE) with addresses from
10.88.0.0/24, but keeps its IP leases in its own root dir. A run that was killed (its processes
ended, the kernel's objects not) leaves pod network namespaces attached to that bridge: their
addresses are leased again by the next node, two namespaces answer for one pod IP, and probes
and clients of the new pods get "connection refused" from the old ones. A namespace no process
is in is such a leftover: removing it removes its end of the veth pair and its address. One that
a process is still in belongs to a live node, which is left alone and named.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field

IP_TIMEOUT = 10
# The kernel tears a deleted namespace down on a work queue, after `ip netns delete` returns; its
# end of each veth pair (and so the port on the bridge) goes a moment later, longer on a busy host.
TEARDOWN_TIMEOUT = 30


@dataclass
class Leftovers:
    removed: list[str] = field(default_factory=list)  # namespaces no process was in
    stuck: list[str] = field(default_factory=list)  # ports of removed namespaces still on the bridge
    live: dict[str, list[int]] = field(default_factory=dict)  # namespace (or port) -> pids in it


def _ip_json(*args: str) -> list[dict]:
    res = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, timeout=IP_TIMEOUT)
    if res.returncode != 0:
        return []
    return json.loads(res.stdout or "[]")


def _pids_in(netns: str) -> list[int]:
    res = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, timeout=IP_TIMEOUT)
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def clear_bridge(bridge: str) -> Leftovers:
    """Remove the network namespaces attached to `bridge` that no process is in; report the rest."""
    found = Leftovers()
    ports = _ip_json("link", "show", "master", bridge)
    if not ports:
        return found
    by_id = {ns.get("id"): ns["name"] for ns in _ip_json("netns", "list") if "name" in ns}
    leaving: list[str] = []
    for port in ports:
        netns = by_id.get(port.get("link_netnsid"))
        if netns is None:  # a peer in an unnamed namespace: nothing to judge it by
            found.live[port["ifname"]] = []
            continue
        pids = _pids_in(netns)
        if pids:
            found.live[netns] = pids
        else:
            leaving.append(port["ifname"])
            if netns not in found.removed:
                subprocess.run(["ip", "netns", "delete", netns], capture_output=True, timeout=IP_TIMEOUT)
                found.removed.append(netns)
    found.stuck = _wait_gone(bridge, leaving)
    return found


def _wait_gone(bridge: str, ifnames: list[str]) -> list[str]:
    """Wait for the kernel to take `ifnames` off `bridge`; those still there at the timeout."""
    deadline = time.monotonic() + TEARDOWN_TIMEOUT
    while True:
        still = sorted(set(ifnames) & {p["ifname"] for p in _ip_json("link", "show", "master", bridge)})
        if not still or time.monotonic() > deadline:
            return still
        time.sleep(0.1)
