"""`kubeadm upgrade node` on the joined node: it writes the cluster's kubelet configuration (the
kubelet-config ConfigMap) to /var/lib/kubelet/config.yaml, and the kubelet restarted as kubeadm's
upgrade guide then says (`systemctl restart kubelet`; the test is the init system) runs with it,
while the pods run through."""

from __future__ import annotations

import json

import yaml

from tests.bootstrap.conftest import KUBELET_ROOT, Joined
from tests.bootstrap.test_tls_bootstrap import _create_pod, _running
from tests.integration.conftest import NODE_NAME, relaunch_node, wait_for


def _max_pods(j: Joined) -> int:
    return int(j.get("node", NODE_NAME)["status"]["capacity"]["pods"])


def test_kubeadm_upgrade_node_writes_the_new_config_and_the_restarted_kubelet_runs_with_it(joined: Joined):
    before = _max_pods(joined)
    wanted = before - 7
    # The cluster's kubelet configuration changes, as `kubeadm upgrade apply` or an operator changes it.
    cm = joined.get("configmap", "kubelet-config", "-n", "kube-system")
    config = yaml.safe_load(cm["data"]["kubelet"])
    config["maxPods"] = wanted
    cm["data"]["kubelet"] = yaml.safe_dump(config)
    joined.cp.kubectl("replace", "-f", "-", input_text=json.dumps(cm))

    _create_pod(joined, "runs-through-the-upgrade")
    pod = wait_for(lambda: _running(joined, "runs-through-the-upgrade"), 90, "the pod to run")
    container_id = pod["status"]["containerStatuses"][0]["containerID"]

    res = joined.kubeadm("upgrade", "node", "--ignore-preflight-errors=all", timeout=300)
    assert res.returncode == 0, f"{res.stdout[-3000:]}{res.stderr[-3000:]}"
    assert "The kubelet configuration for this node was successfully upgraded" in res.stdout
    assert yaml.safe_load(joined.file(f"{KUBELET_ROOT}/config.yaml").read_text())["maxPods"] == wanted
    assert _max_pods(joined) == before, "the running kubelet keeps its configuration until restarted"

    node = joined.node
    node.proc.terminate()
    assert node.proc.wait(timeout=150) == 0, "the kubelet did not stop cleanly"
    relaunch_node(node)
    wait_for(lambda: _max_pods(joined) == wanted, 90, f"the node's pod capacity to become {wanted}")
    wait_for(lambda: joined.ready() == "True", 90, "the node Ready after the restart")
    after = joined.get("pod", "runs-through-the-upgrade")["status"]["containerStatuses"][0]
    assert (after["containerID"], after["restartCount"]) == (container_id, 0), "the pod ran through the restart"
    # Gone before the next test, whose pod's container has the same name.
    joined.cp.kubectl("delete", "pod", "runs-through-the-upgrade", "--timeout=120s", timeout=150)
    wait_for(lambda: container_id.removeprefix("containerd://") not in joined.runtime.running_containers().values(),
             60, "the pod's container to stop")
