"""serializeImagePulls true, as production nodes following the kubelet's default set it
(tests/security/conftest.py): image pulls one at a time, seen from the registry's side."""

from __future__ import annotations

from tests.integration.slow_registry import BLOB_DELAY, SlowRegistry, distinct_images, most_at_once


def test_serialized_pulls_run_one_at_a_time(pods):
    repos = distinct_images(pods.registry, "serial-pull", 2)
    with SlowRegistry(pods.registry, BLOB_DELAY) as slow:
        for i, repo in enumerate(repos):
            pods.write_pod(f"serial-pull-{i}", {"containers": [
                {"name": "app", "image": f"{slow.address}/{repo}:1.0", "command": ["sleep", "3600"]}]})
        for i in range(len(repos)):
            pods.wait_running(f"serial-pull-{i}", 90)
        spans = [slow.span(repo) for repo in repos]
    assert most_at_once(spans) == 1, f"pulls overlapped: {spans}"
