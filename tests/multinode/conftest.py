"""Three pykubelet nodes in one real cluster: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager 1.37, and three nodes, each in its own network namespace with its own
containerd, root dir, NATS, registry and pod CIDR, and its own way of finding configMap and
secret changes (Watch, Get, Cache)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cluster.harness import ControlPlane, HarnessError
from tests.integration.conftest import Node, launch_node, require_node_prerequisites, stop_node, wait_for
from tests.multinode.netns import HOST_IP, NodeNetwork, create_bridge, delete_bridge

NODES = 3
# Inside each node's namespace: the same image references work on every node.
REGISTRY_PORT = 5000
# Short, so a lost node shows within the test: NotReady after 20 s of silence. No TTL controller:
# it would set every Node's node.alpha.kubernetes.io/ttl to 0 (a small cluster) over the value
# test_change_detection.py gives node-3's.
CONTROLLER_MANAGER_ARGS = ("--node-monitor-grace-period=20s", "--node-monitor-period=2s", "--controllers=*,-ttl-controller")
# How each node learns of a configMap or secret change (configMapAndSecretChangeDetectionStrategy):
# node-1 keeps the default, Watch.
CHANGE_DETECTION = {"node-2": "Get", "node-3": "Cache"}


class MultiNodeCluster:
    def __init__(self, cp: ControlPlane, nodes: dict[str, Node], networks: dict[str, NodeNetwork]) -> None:
        self.cp = cp
        self.nodes = nodes
        self.networks = networks

    def kubectl(self, *args: str, **kw):
        return self.cp.kubectl(*args, **kw)

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def condition(self, node: str, ctype: str = "Ready") -> str:
        conds = self.get("node", node)["status"].get("conditions", [])
        return next((c["status"] for c in conds if c["type"] == ctype), "Unknown")


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    require_node_prerequisites()
    create_bridge()
    networks = {f"node-{i}": NodeNetwork(i) for i in range(1, NODES + 1)}
    cp = ControlPlane(tmp_path_factory.mktemp("multinode-control-plane"), "node-1", full=True, listen_ip=HOST_IP)
    nodes: dict[str, Node] = {}
    try:
        for net in networks.values():
            net.create()
        try:
            cp.start()
            cp.start_controllers(CONTROLLER_MANAGER_ARGS)
        except HarnessError as exc:
            pytest.fail(f"cannot start the control plane: {exc}")

        def launch(name: str) -> Node:
            net = networks[name]
            kubeconfig = cp.kubeconfig_for_node(name)
            return launch_node(tmp_path_factory.mktemp(name), ["--kubeconfig", str(kubeconfig), "--node-ip", net.address],
                               node_name=name, pod_cidr=f"10.244.{net.index}.0/24", wrap=net.wrap,
                               registry_port=REGISTRY_PORT,
                               extra_config=(f"configMapAndSecretChangeDetectionStrategy: {CHANGE_DETECTION[name]}\n"
                                             if name in CHANGE_DETECTION else ""))

        with ThreadPoolExecutor(NODES) as pool:
            futures = {name: pool.submit(launch, name) for name in networks}
        failures = []
        for name, future in futures.items():
            try:
                nodes[name] = future.result()
            except BaseException as exc:  # pytest.fail inside launch_node: keep the others to stop them
                failures.append(f"{name}: {exc}")
        if failures:
            pytest.fail("; ".join(failures))
        c = MultiNodeCluster(cp, nodes, networks)
        for name in nodes:
            wait_for(lambda name=name: c.condition(name) == "True", 90, f"{name} Ready")
        yield c
    finally:
        for node in nodes.values():
            stop_node(node)
        cp.stop()
        for net in networks.values():
            net.delete()
        delete_bridge()
