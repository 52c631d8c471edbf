"""`kubeadm reset` on the node, last: with the kubelet stopped (kubeadm finds no init system to
stop it with, so its init system does), reset removes every pod through the runtime and the
files join and the kubelet wrote; `pykubelet uninstall --as-kubelet` then removes the kubelet
binary and units it installed."""

from __future__ import annotations

from tests.bootstrap.conftest import KUBELET_PATH, KUBELET_ROOT, UNIT_DIR, Joined
from tests.integration.conftest import stop_node


def test_kubeadm_reset_removes_the_nodes_pods_and_files(joined: Joined):
    sandboxes = joined.runtime.call(lambda cri: cri.list_pod_sandbox())
    assert sandboxes, "the node runs no pod to reset"
    stop_node(joined.node)
    res = joined.kubeadm("reset", "--force", f"--cri-socket={joined.runtime.endpoint}")
    assert res.returncode == 0, f"{res.stdout[-2000:]}{res.stderr[-2000:]}"
    assert joined.runtime.call(lambda cri: cri.list_pod_sandbox()) == []
    assert not joined.file("/etc/kubernetes/kubelet.conf").exists()
    assert not joined.file(f"{KUBELET_ROOT}/config.yaml").exists()
    assert not joined.file(f"{KUBELET_ROOT}/pki").exists()
    # And pykubelet's place as the kubelet goes with `pykubelet uninstall --as-kubelet`.
    res = joined.pykubelet("uninstall", "--as-kubelet", "--kubelet-path", KUBELET_PATH)
    assert res.returncode == 0, res.stderr
    assert f"removed {KUBELET_PATH}" in res.stdout
    assert not joined.file(KUBELET_PATH).exists()
    assert not joined.file(f"{UNIT_DIR}/kubelet.service").exists()
