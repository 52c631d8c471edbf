"""Image pulls as the node's configuration orders them, seen from the registry's side. This
package's node has pykubelet's default: pulls in parallel, up to maxParallelImagePulls 5 at once
(the kubelet's default is one at a time; tests/security/test_image_pulls.py shows
serializeImagePulls true, tests/cpu_manager/test_node_settings.py a cap of 2)."""

from __future__ import annotations

from tests.integration.slow_registry import most_at_once, pull_spans


def test_pulls_run_in_parallel_by_default(pods):
    spans = pull_spans(pods, "default-pull", 3)
    assert most_at_once(spans) == 3, f"pulls under way at once: {spans}"
