"""`pykubelet kubelet` is the kubelet to the host: it answers kubeadm's health check, runs on the
host's container runtime, and a stop (systemctl stop kubelet, kubeadm upgrade's restart) leaves
the pods running for the next start to adopt, as the kubelet's does."""

from __future__ import annotations

import json

import httpx

from tests.bootstrap.conftest import Joined
from tests.bootstrap.test_tls_bootstrap import _create_pod, _csrs, _running
from tests.integration.conftest import relaunch_node, wait_for
from tests.kubeadm_control_plane import TOKEN_ID


def test_healthz_answers_as_kubeadm_waits_for_it(joined: Joined):
    # kubeadm join polls http://127.0.0.1:10248/healthz until it says ok.
    resp = httpx.get(f"http://127.0.0.1:{joined.node.healthz_port}/healthz", timeout=5)
    assert (resp.status_code, resp.text) == (200, "ok")


def test_a_stop_leaves_the_pods_running_and_the_next_start_adopts_them(joined: Joined):
    _create_pod(joined, "outlives-the-kubelet")
    pod = wait_for(lambda: _running(joined, "outlives-the-kubelet"), 90, "the pod to run")
    container_id = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    node = joined.node
    node.proc.terminate()
    assert node.proc.wait(timeout=150) == 0, "pykubelet kubelet did not stop cleanly"
    # The kubelet's services and its bus are gone; the runtime and the pod's container are not.
    assert not list((node.root / "run").glob("*.pid")), "processes of the stopped node are left"
    assert container_id in joined.runtime.running_containers().values(), \
        "the pod's container did not outlive the kubelet's stop"
    relaunch_node(node)
    wait_for(lambda: joined.ready() == "True", 90, "the node Ready again after the start")
    after = joined.get("pod", "outlives-the-kubelet")["status"]["containerStatuses"][0]
    assert after["containerID"] == f"containerd://{container_id}" and after["restartCount"] == 0
    # The kubeconfig the bootstrap wrote is used again: no second bootstrap request.
    bootstraps = [c for c in _csrs(joined) if c["spec"]["username"] == f"system:bootstrap:{TOKEN_ID}"]
    assert len(bootstraps) == 1, json.dumps([c["metadata"]["name"] for c in bootstraps])
    joined.cp.kubectl("delete", "pod", "outlives-the-kubelet", "--wait=false")
