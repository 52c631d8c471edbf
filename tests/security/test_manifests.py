"""Manifests written to hurt the node: an alias bomb, a 20 MiB file, a symlink to /etc/shadow,
path-like UIDs. Each is reported once by name and skipped; the good pod beside them runs and
pod-sync is never restarted."""

from __future__ import annotations

import os


def _bomb() -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\napiVersion: v1\nkind: Pod\n"


def _pod_yaml(pods, name: str, uid: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, uid: "{uid}"}}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{{name: app, image: "{pods.image('busybox')}", command: [sleep, "3600"]}}]
"""


def test_hostile_manifests_are_reported_and_skipped_beside_a_running_pod(pods, canary):
    pod_sync = pods.service_pid("pod-sync")
    shadow = [line.strip() for line in open("/etc/shadow") if line.strip()]
    pods.write("bomb.yaml", _bomb())
    pods.write("huge.yaml", "# " + "x" * (20 * 2**20) + "\n")
    link = pods.manifests / "shadow.yaml"
    os.symlink("/etc/shadow", link)
    pods.written.append(link)
    pods.write("escape.yaml", _pod_yaml(pods, "escape", f"../../../..{canary.dir}"))
    pods.write("absolute.yaml", _pod_yaml(pods, "absolute", str(canary.dir)))
    pods.write_pod("good", {"containers": [{"name": "app", "image": pods.image("busybox"),
                                            "command": ["sleep", "3600"]}]})
    pods.wait_running("good")
    status, errors = pods.wait_manifest_errors(5)
    assert "YAML aliases" in errors["bomb.yaml"]
    assert "1.5 MiB" in errors["huge.yaml"]
    assert "Required value" in errors["shadow.yaml"] or "expected a Pod" in errors["shadow.yaml"], errors
    assert "metadata.uid" in errors["escape.yaml"] and "metadata.uid" in errors["absolute.yaml"]
    assert not [line for line in shadow if line in str(status)], "no line of /etc/shadow is shown"
    assert [p["name"] for p in status["pods"]] == ["good-testnode"]
    assert pods.service_pid("pod-sync") == pod_sync, "pod-sync was never restarted"
