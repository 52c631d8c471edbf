"""A node whose pod network comes from a CNI agent running as a pod, as on a kubeadm node with
Calico, Cilium or Flannel: the node's containerd reads a directory pykubelet writes nothing to
(`--cni-conf-dir`), so the network is not ready and ordinary pods wait; the agent, a privileged
hostNetwork pod, writes its network config there through a hostPath; the runtime turns
NetworkReady, the node's network with it, and the waiting pod starts with an address of the
agent's network."""

from __future__ import annotations

import ipaddress
import json
import subprocess

from tests.integration.conftest import launch_node, stop_node, wait_for

AGENT_BRIDGE = "cniagent0"
AGENT_SUBNET = "10.77.0.0/24"


def agent_conflist(ipam_dir: str) -> str:
    return json.dumps({"cniVersion": "0.4.0", "name": "agent-network", "plugins": [
        {"type": "bridge", "bridge": AGENT_BRIDGE, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": AGENT_SUBNET}]], "dataDir": ipam_dir}}]})


def network(node) -> dict:
    return node.admin_get("network", "/network", timeout=5).json()


def test_a_cni_agent_pod_writes_the_network_the_node_waits_for(tmp_path):
    agent_dir, ipam_dir = tmp_path / "etc-cni-net.d", tmp_path / "agent-ipam"
    ipam_dir.mkdir()
    (tmp_path / "node").mkdir()
    node = launch_node(tmp_path / "node", ["--cni-conf-dir", str(agent_dir)])
    try:
        wait_for(lambda: "none is there yet" in network(node)["message"], 30, "the node to wait for a CNI agent")
        state = network(node)
        assert not state["ready"] and str(agent_dir) in state["message"], state
        assert not list(agent_dir.iterdir()), "pykubelet wrote nothing into the agent's directory"
        assert not list((node.root / "cni" / "net.d").glob("*.conflist")), "nor a network of its own"

        bb = node.image("busybox")
        node.write_pod("app", {"containers": [{"name": "app", "image": bb, "command": ["sleep", "3600"]}]})
        waiting = node.wait_pod("app", lambda p: "pod network not ready" in (p["why"] or ""), 30,
                                "app waiting for the network")
        assert waiting["phase"] == "Pending" and not waiting["podIP"], waiting
        assert f"the runtime reads CNI configs from {agent_dir}" in waiting["why"], "`pykubelet status` says why"

        config = agent_conflist(str(ipam_dir))
        node.write_pod("cni-agent", {
            "hostNetwork": True,
            "volumes": [{"name": "net-d", "hostPath": {"path": str(agent_dir)}}],
            "containers": [{"name": "agent", "image": bb, "securityContext": {"privileged": True},
                            "command": ["sh", "-c", f"echo '{config}' > /host/etc/cni/net.d/.new && "
                                                    "mv /host/etc/cni/net.d/.new /host/etc/cni/net.d/10-agent.conflist "
                                                    "&& exec sleep 3600"],
                            "volumeMounts": [{"name": "net-d", "mountPath": "/host/etc/cni/net.d"}]}]})
        node.wait_running("cni-agent")
        wait_for(lambda: network(node)["ready"], 60, "the network to turn ready from the agent's config")
        assert network(node)["cniConfig"] == str(agent_dir / "10-agent.conflist")
        app = node.wait_running("app", 60)
        assert ipaddress.ip_address(app["podIP"]) in ipaddress.ip_network(AGENT_SUBNET), app
        assert list(ipam_dir.rglob(app["podIP"])), "the agent's IPAM handed out the address"
    finally:
        stop_node(node)
        subprocess.run(["ip", "link", "delete", AGENT_BRIDGE], capture_output=True, timeout=10)
