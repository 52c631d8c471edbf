"""Image pulls as the node's configuration orders them, seen from the registry's side. This
package's node has pykubelet's default: pulls in parallel, up to maxParallelImagePulls 5 at once
(the kubelet's default is one at a time; tests/security/test_image_pulls.py shows
serializeImagePulls true, tests/cpu_manager/test_node_settings.py a cap of 2)."""

from __future__ import annotations

from tests.integration.slow_registry import BLOB_DELAY, SlowRegistry, distinct_images, most_at_once


def test_pulls_run_in_parallel_by_default(pods):
    repos = distinct_images(pods.registry, "default-pull", 3)
    with SlowRegistry(pods.registry, BLOB_DELAY) as slow:
        for i, repo in enumerate(repos):
            pods.write_pod(f"default-pull-{i}", {"containers": [
                {"name": "app", "image": f"{slow.address}/{repo}:1.0", "command": ["sleep", "3600"]}]})
        for i in range(len(repos)):
            pods.wait_running(f"default-pull-{i}", 90)
        spans = [slow.span(repo) for repo in repos]
    assert most_at_once(spans) == 3, f"pulls under way at once: {spans}"
