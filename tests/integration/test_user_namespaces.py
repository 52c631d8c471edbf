"""hostUsers: false on a real node, with the node's containerd: a runtime whose default handler
makes user namespaces (containerd 2.0 and newer) runs the pod in one of its own, mapped from 0 to
the block the node gave it; one that does not (Debian bookworm's containerd 1.6) holds the pod's
sandbox with the kubelet's words, and every other pod runs."""

from __future__ import annotations

import json

from tests.integration.conftest import Node


def test_host_users_false_on_the_nodes_containerd(pods: Node):
    bb = pods.image("busybox")
    status = pods.runtime(lambda cri: cri.status())
    default = next((h for h in status.runtime_handlers if h.name == ""), None)
    supported = default is not None and default.features.user_namespaces
    pods.write_pod("other", {"containers": [{"name": "c", "image": bb, "command": ["sleep", "3600"]}]})
    pods.write_pod("userns", {
        "hostUsers": False,
        "containers": [{"name": "c", "image": bb, "command": ["sh", "-c", "cat /proc/self/uid_map; sleep 3600"]}]})
    pods.wait_running("other")
    if supported:
        pod = pods.wait_running("userns")
        [mapping] = json.loads((pods.root / "pods" / pod["uid"] / "userns").read_text())["uidMappings"]
        code, out = pods.exec(pod["uid"], "c", ["cat", "/proc/self/uid_map"])
        assert code == 0 and out.split() == ["0", str(mapping["hostId"]), str(mapping["length"])], out
        return
    pod = pods.wait_pod("userns", lambda p: "user namespaces" in p["why"], 60,
                        "the user namespace refusal in the pod's summary")
    assert "can't set `spec.hostUsers: false`, runtime does not support user namespaces" in pod["why"]
    assert pod["phase"] == "Pending"
    assert not pods.sandboxes_of(pod["uid"]), "no sandbox is made without its user namespace"
    assert not (pods.root / "pods" / pod["uid"] / "userns").exists(), "no IDs are taken for it"
    assert pods.pod("other")["phase"] == "Running"
