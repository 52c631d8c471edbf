"""imagePullCredentialsVerificationPolicy NeverVerifyAllowlistedImages on a node of its own: an
image put into the node's containerd by other means than a pull (here: `ctr images tag`) is
used by a pod only when preloadedImagesVerificationAllowlist names it; any other must be pulled
by the pod first, and this one cannot be (its registry does not exist)."""

from __future__ import annotations

import subprocess

from tests.integration.conftest import launch_node, stop_node, wait_for

ALLOWED, OTHER = "preloaded.invalid/allowed/busybox:1", "preloaded.invalid/other/busybox:1"


def test_only_allowlisted_preloaded_images_are_used_without_a_pull(tmp_path):
    (tmp_path / "node").mkdir()
    node = launch_node(tmp_path / "node", extra_config="imagePullCredentialsVerificationPolicy: "
                                                       "NeverVerifyAllowlistedImages\n"
                                                       "preloadedImagesVerificationAllowlist:\n"
                                                       "- preloaded.invalid/allowed/*\n")
    try:
        busybox = node.image("busybox")
        node.write_pod("puller", {"containers": [{"name": "app", "image": busybox, "command": ["sleep", "3600"]}]})
        node.wait_running("puller")
        for target in (ALLOWED, OTHER):
            subprocess.run(["ctr", "-a", str(node.root / "containerd" / "containerd.sock"), "-n", "k8s.io", "images",
                            "tag", busybox, target], check=True, capture_output=True, timeout=30)
        for name, image in (("allowed", ALLOWED), ("other", OTHER)):
            node.write_pod(name, {"containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                                                  "command": ["sleep", "3600"]}]})
        node.wait_running("allowed")
        refused = node.wait_pod("other", lambda p: p["containers"][0]["reason"] in ("ErrImagePull", "ImagePullBackOff"),
                                60, "the preloaded image not on the allowlist to be pulled, and the pull to fail")
        assert "preloaded.invalid" in refused["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        log = node.root / "logs" / "pod-sync.log"
        wait_for(lambda: f"image {OTHER} is on the node, but pod " in log.read_text(), 10,
                 "pod-sync saying why it pulls an image it has")
    finally:
        stop_node(node)
