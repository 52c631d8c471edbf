"""A fork bomb stays in its pod: podPidsLimit caps every pod's cgroup (pids.max), the bomb's
forks fail at the cap, and a pod started beside it runs."""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import POD_PIDS_LIMIT, wait_for


def _pids(uid: str, name: str) -> str:
    return (Path("/sys/fs/cgroup/pids/kubepods/besteffort") / f"pod{uid}" / name).read_text().strip()


def test_a_fork_bomb_is_held_at_the_pod_pids_limit(pods):
    # 200 processes more than the pod may have; busybox sh exits at its first failed fork.
    bomb = f"i=0; while [ $i -lt {POD_PIDS_LIMIT + 200} ]; do sleep 600 & i=$((i+1)); done; echo forked; sleep 3600"
    pods.write_pod("bomb", {"terminationGracePeriodSeconds": 0, "containers": [{
        "name": "bomb", "image": pods.image("busybox"), "command": ["sh", "-c", bomb]}]})
    pod = wait_for(lambda: pods.pod("bomb"), 30, "the pod")
    wait_for(lambda: _pids(pod["uid"], "pids.max") == str(POD_PIDS_LIMIT), 60, "the pod cgroup's pids.max")
    wait_for(lambda: "can't fork" in pods.cli("logs", "bomb", check=False).stdout, 60, "the bomb's failed fork")
    assert _pids(pod["uid"], "pids.peak") == str(POD_PIDS_LIMIT), "never more processes than the limit"
    assert "forked" not in pods.cli("logs", "bomb", check=False).stdout
    pods.write_pod("beside", {"containers": [{"name": "app", "image": pods.image("busybox"),
                                              "command": ["sleep", "3600"]}]})
    pods.wait_running("beside")
