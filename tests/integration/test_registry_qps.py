"""registryPullQPS and registryBurst on a node of their own (0.2 pulls a second, one at once):
two pods of two new images written together; one image is pulled, the other pull is not made
and fails ErrImagePull "pull QPS exceeded" as the kubelet's does, then is made once the bucket
has a token again and the back-off is over."""

from __future__ import annotations

from tests.integration.conftest import launch_node, stop_node, wait_for
from tests.integration.slow_registry import distinct_images

QPS, BURST = 0.2, 1


def test_pulls_beyond_registry_pull_qps_fail_and_are_made_later(tmp_path):
    (tmp_path / "node").mkdir()
    node = launch_node(tmp_path / "node", extra_config=f"registryPullQPS: {QPS}\nregistryBurst: {BURST}\n")
    try:
        repos = distinct_images(node.registry, "qps", 2)
        for i, repo in enumerate(repos):
            node.write_pod(f"qps-{i}", {"containers": [{"name": "app", "image": f"{node.registry}/{repo}:1.0",
                                                         "command": ["sleep", "3600"]}]})
        # The pull not made is in back-off, its pod waiting with the kubelet's message.
        refused = wait_for(lambda: next((p for i in range(2) if (p := node.pod(f"qps-{i}"))
                                         and p["containers"][0]["reason"] in ("ErrImagePull", "ImagePullBackOff")),
                                        None), 30, "a pull refused over registryPullQPS")
        message = refused["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        assert "pull QPS exceeded (registryPullQPS 0.2, registryBurst 1)" in message, message
        for i in range(2):
            node.wait_running(f"qps-{i}", 60)  # the refused pull made after its back-off
        log = (node.root / "logs" / "pod-sync.log").read_text()
        assert log.count("not made: more than registryPullQPS 0.2 a second (registryBurst 1)") == 1, \
            "one pull refused, then made once the bucket had a token again"
    finally:
        stop_node(node)
