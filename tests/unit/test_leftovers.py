"""What a dead supervisor left running is found by its pid files, and only trusted while the
process still names the node's root dir: a recycled pid is never signalled."""

from __future__ import annotations

import os
import subprocess
import sys

from services.supervisor.leftovers import Leftover, find_leftovers, pid_alive, stop_leftovers


def _sleeper(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args])


async def test_leftovers_are_found_and_stopped_and_strangers_left_alone(tmp_path):
    root = tmp_path / "node"
    (root / "run").mkdir(parents=True)
    ours = _sleeper("--root-dir", str(root))
    config_under_root = _sleeper("-c", f"{root}/bus/nats.conf")
    stranger = _sleeper("--root-dir", f"{root}-other")  # a recycled pid: names another dir
    try:
        (root / "run" / "pod-sync.pid").write_text(f"{ours.pid}\n")
        (root / "run" / "nats.pid").write_text(f"{config_under_root.pid}\n")
        (root / "run" / "containerd.pid").write_text(f"{stranger.pid}\n")
        (root / "run" / "probe.pid").write_text(f"{os.getpid()}\n")  # this test process
        (root / "run" / "volume.pid").write_text("garbage\n")
        found = find_leftovers(root)
        assert found == [Leftover("pod-sync", ours.pid), Leftover("nats", config_under_root.pid)]
        await stop_leftovers(root, found, timeout=5)
        assert ours.wait(5) is not None and config_under_root.wait(5) is not None
        assert pid_alive(stranger.pid), "a process not naming the root dir is never signalled"
        assert not (root / "run" / "pod-sync.pid").exists()
    finally:
        for p in (ours, config_under_root, stranger):
            p.kill()
            p.wait()


async def test_a_hostile_node_file_falls_back_to_safe_defaults(tmp_path, monkeypatch):
    """run/node.json tells `down` whether to keep pods and where their logs are; what is not an
    absolute path or a real boolean is not used."""
    from services.supervisor import leftovers, teardown

    root = tmp_path / "node"
    (root / "run").mkdir(parents=True)
    seen = []

    async def fake_teardown(root_dir, endpoint, logs_dir):
        seen.append(logs_dir)

    monkeypatch.setattr(teardown, "teardown_node", fake_teardown)
    containerd = _sleeper("--config", f"{root}/containerd/config.toml")
    try:
        for content in ('[1, 2]', '{"pod_logs_dir": "../../etc", "keep_pods": "yes"}', "not json"):
            (root / "run" / "node.json").write_text(content)
            await leftovers.stop_abandoned_node(root, [Leftover("containerd", containerd.pid)], timeout=5)
            containerd.wait(5)
            containerd = _sleeper("--config", f"{root}/containerd/config.toml")
        assert seen == ["/var/log/pods"] * 3, "pods removed (keep_pods only when true), logs dir the default"
    finally:
        containerd.kill()
        containerd.wait()
