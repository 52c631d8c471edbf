"""The CLI's answers to bad input: a clear message, a non-zero exit, nothing started."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO)


def test_service_with_invalid_config_names_the_field(tmp_path):
    cfg = tmp_path / "k.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: -1\nfoo: 1\n")
    res = run("pod-sync", "--config", str(cfg), "--root-dir", str(tmp_path))
    assert res.returncode == 2
    assert "maxPods: must be at least 1" in res.stderr and "foo: unknown field" in res.stderr


def test_up_refuses_a_bad_config_before_starting_anything(tmp_path):
    cfg = tmp_path / "k.yaml"
    cfg.write_text("syncFrequency: often\n")
    res = run("up", "--config", str(cfg), "--root-dir", str(tmp_path / "root"))
    assert res.returncode == 2 and "syncFrequency: invalid duration 'often'" in res.stderr
    assert not (tmp_path / "root" / "run").exists()


def test_status_without_a_node_says_so(tmp_path):
    res = run("status", "--root-dir", str(tmp_path))
    assert res.returncode == 1 and "is a node running?" in res.stderr


def test_down_without_a_node_is_harmless(tmp_path):
    res = run("down", "--root-dir", str(tmp_path))
    assert res.returncode == 0 and "no node is running" in res.stdout


def test_unknown_command_lists_commands():
    res = run("fly")
    assert res.returncode == 2 and "unknown command 'fly'" in res.stderr and "pod-sync" in res.stderr


def test_help_lists_every_service():
    out = run("--help").stdout
    for svc in ("pod-sync", "probe", "volume", "network", "eviction", "status-reporter", "node-api"):
        assert svc in out
