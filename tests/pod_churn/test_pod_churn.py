"""Pods created and deleted in waves leave nothing behind: after each wave is gone from the API
server, the node gives back every sandbox, container, shim, network namespace, veth, IP lease,
NAT chain, mount, pod directory, cgroup and store row its pods held, and no service holds more
open files or bus subscriptions than before the first wave (tests/node_inventory.py counts them).
The churn benchmark (bench/churn.py) does the same with thousands of pods, beside the kubelet."""

from __future__ import annotations

import json

import pytest

from shared.host.cni import cni_ipam_dir
from tests.churn import CONFIG_MAP, SECRET, churn_pod, config_objects
from tests.integration.conftest import NODE_NAME, SERVICES, wait_for
from tests.node_inventory import HALF_CLOSED, Agent, Inventory, bus_subscriptions, take

WAVES, WAVE_SIZE = 3, 20
# Connections a service opens and closes by itself (an API watch re-established, a pooled
# connection, a log file reopened at rotation): a leak of one per pod would be 20 a wave.
FD_SLACK = 4
LABEL = "test"


def inventory(node, api_server: str) -> Inventory:
    """What the node holds. A connection the API server closed after 90 s idle stays half-closed
    in the service's HTTP pool until its next request (httpx notices only then, where Go's client
    reads every idle connection): at most one per pooled connection, and not counted. One to
    anywhere else is a descriptor the service lost."""
    inv = take(Agent(endpoint=f"unix://{node.root}/containerd/containerd.sock", root=node.root,
                      pods_dir=node.root / "pods", ipam_dir=cni_ipam_dir(node.root), store=node.root / "state.db",
                      pids={name: node.service_pid(name) for name in [*SERVICES, "nats", "supervisor"]},
                      bus_subscriptions=bus_subscriptions(
                          {service: node.admin_get(service, "/metrics").text for service in SERVICES})))
    inv.counts = {k: v for k, v in inv.counts.items() if not (k.startswith(HALF_CLOSED) and k.endswith(api_server))}
    return inv


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions") or [])


def _wait_given_back(node, api_server: str, before: Inventory, what: str, fds: bool) -> None:
    grown: dict = {}

    def given_back() -> bool:
        nonlocal grown
        now = inventory(node, api_server)
        grown = now.grown(before, fd_slack=FD_SLACK)
        if not fds:
            grown = {k: v for k, v in grown.items() if not k.startswith("open fds")}
        return not grown
    try:
        # gRPC's event-engine threads and their pollers, and pooled connections, go after 30 s idle.
        wait_for(given_back, 90 if fds else 45, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still more than before the first wave (before, now): {grown}") from None


@pytest.mark.timeout(900)  # three waves, each given back, then the idle connections' 30 s
def test_pods_created_and_deleted_in_waves_leave_nothing_behind(cluster):
    node = cluster.node
    image = node.image("busybox")
    cluster.kubectl("apply", "-f", "-", input_text=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                "items": config_objects()}))
    api_server = cluster.cp.server.removeprefix("https://")
    before = inventory(node, api_server)
    assert before.counts["bus subscriptions"] > 0, "the services' bus subscriptions are not reported"
    assert not [k for k in before.counts if k.startswith(HALF_CLOSED)], before.counts
    for wave in range(WAVES):
        pods = [churn_pod(f"churn-{wave}-{i}", image, NODE_NAME, LABEL) for i in range(WAVE_SIZE)]
        cluster.kubectl("create", "-f", "-", input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))

        def all_ready() -> bool:
            items = cluster.get("pods", "-l", f"churn={LABEL}")["items"]
            return len(items) == WAVE_SIZE and all(_ready(p) for p in items)
        wait_for(all_ready, 180, f"wave {wave}: {WAVE_SIZE} churn pods Ready")
        during = inventory(node, api_server)
        # Each pod holds its sandbox, two containers (init and app), a lease and a pod directory.
        for what, per_pod in (("sandboxes", 1), ("containers", 2), ("IP leases", 1), ("pod directories", 1)):
            assert during.counts[what] >= before.counts[what] + WAVE_SIZE * per_pod, (wave, what, during.counts)
        cluster.kubectl("delete", "pods", "-l", f"churn={LABEL}", "--wait=true", timeout=180)
        _wait_given_back(node, api_server, before, f"wave {wave}: the node to give back what its pods held", fds=False)
    _wait_given_back(node, api_server, before, "the services' open files to come back to where they were", fds=True)
    cluster.kubectl("delete", f"configmap/{CONFIG_MAP}", f"secret/{SECRET}")
