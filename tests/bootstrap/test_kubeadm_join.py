"""What `kubeadm join` left on the node and what a user does next: a Deployment's pod scheduled
to the node, `kubectl logs` and `kubectl exec` on it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bootstrap.conftest import KUBELET_PATH, KUBELET_ROOT, UNIT_DIR, Joined
from tests.integration.conftest import NODE_NAME, wait_for


def test_kubeadm_join_succeeds_with_pykubelet_as_the_kubelet(joined: Joined):
    assert "This node has joined the cluster" in joined.join_output, joined.join_output[-3000:]
    # kubeadm's files, on the node; the bootstrap kubeconfig is gone once join has waited for
    # the TLS bootstrap, as kubeadm removes it.
    config = joined.file(f"{KUBELET_ROOT}/config.yaml").read_text()
    assert "cgroupDriver: cgroupfs" in config and f"containerRuntimeEndpoint: {joined.runtime.endpoint}" in config
    assert f"--hostname-override={NODE_NAME}" in joined.file(f"{KUBELET_ROOT}/kubeadm-flags.env").read_text()
    assert joined.file("/etc/kubernetes/pki/ca.crt").read_bytes() == joined.cp.ca.read_bytes()
    assert not joined.file("/etc/kubernetes/bootstrap-kubelet.conf").exists()
    # pykubelet install --as-kubelet put pykubelet where kubelet.service runs the kubelet from.
    assert "services.cli.main kubelet" in joined.file(KUBELET_PATH).read_text()
    assert f"ExecStart={KUBELET_PATH} $KUBELET_KUBECONFIG_ARGS" in \
        joined.file(f"{UNIT_DIR}/kubelet.service.d/10-kubeadm.conf").read_text()
    assert joined.node.argv[-1].endswith(f"exec {KUBELET_PATH} $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS "
                                         "$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS")
    # The machine's own directories were never touched.
    assert not Path("/etc/kubernetes/kubelet.conf").exists() and not Path(f"{KUBELET_ROOT}/config.yaml").exists()
    assert not Path(KUBELET_PATH).exists() or "pykubelet" not in Path(KUBELET_PATH).read_text(errors="replace")


def test_a_deployment_runs_on_the_node_with_logs_and_exec(joined: Joined):
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "hello"}},
                 "template": {"metadata": {"labels": {"app": "hello"}},
                              "spec": {"terminationGracePeriodSeconds": 2, "containers": [{
                                  "name": "hello", "image": joined.node.image("busybox"),
                                  "command": ["sh", "-c", "echo hello from $(hostname); exec sleep 100000"]}]}}}}
    joined.cp.kubectl("apply", "-f", "-", input_text=json.dumps(deployment))

    def running() -> dict | None:
        pods = joined.get("pods", "-l", "app=hello")["items"]
        statuses = pods[0]["status"].get("containerStatuses") or [] if pods else []
        return pods[0] if statuses and "running" in statuses[0]["state"] else None

    pod = wait_for(running, 120, "the Deployment's pod to run")
    name = pod["metadata"]["name"]
    assert pod["spec"]["nodeName"] == NODE_NAME  # the scheduler's choice: the only node
    logs = wait_for(lambda: (out := joined.cp.kubectl("logs", name, check=False).stdout) and out, 30,
                    "kubectl logs to show the container's output")
    assert logs.strip() == f"hello from {name}"
    res = joined.cp.kubectl("exec", name, "--", "cat", "/proc/1/cmdline")
    assert res.stdout.replace("\0", " ").strip() == "sleep 100000"
    joined.cp.kubectl("delete", "deployment", "hello", "--wait=false")
