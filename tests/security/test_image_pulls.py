"""serializeImagePulls true, as production nodes following the kubelet's default set it
(tests/security/conftest.py): image pulls one at a time, seen from the registry's side."""

from __future__ import annotations

from tests.integration.slow_registry import most_at_once, pull_spans


def test_serialized_pulls_run_one_at_a_time(pods):
    spans = pull_spans(pods, "serial-pull", 2)
    assert most_at_once(spans) == 1, f"pulls overlapped: {spans}"
