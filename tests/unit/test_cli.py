"""The CLI's answers to bad input: a clear message, a non-zero exit, nothing started."""

import os
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


GRPC_SEEN = """
import os, sys
from services.cli.main import main

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "grpc":
            print("GRPC_EXPERIMENTS at import:", os.environ.get("GRPC_EXPERIMENTS"))
        return None

sys.meta_path.insert(0, Watch())
main(sys.argv[1:])
"""


def test_grpc_settings_are_set_before_a_service_imports_grpc(tmp_path):
    """gRPC core reads GRPC_EXPERIMENTS once, at import: the CLI sets it before any service
    module is loaded, and leaves an operator's own value alone."""
    cfg = tmp_path / "k.yaml"
    cfg.write_text("maxPods: -1\n")  # the service stops at the config, after its imports
    argv = [sys.executable, "-c", GRPC_SEEN, "pod-sync", "--config", str(cfg), "--root-dir", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert "GRPC_EXPERIMENTS at import: -event_engine_client" in res.stdout, res.stdout + res.stderr
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**env, "GRPC_EXPERIMENTS": "-event_engine_listener"})
    assert "GRPC_EXPERIMENTS at import: -event_engine_listener" in res.stdout, res.stdout + res.stderr


def test_up_refuses_a_kubelet_field_it_does_not_implement_naming_it(tmp_path):
    cfg = tmp_path / "k.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsystemCgroups: /custom\n"
                   "cgroupsPerQOS: true\n")
    res = run("up", "--config", str(cfg), "--root-dir", str(tmp_path / "root"))
    assert res.returncode == 2
    assert 'systemCgroups: "/custom" is not implemented by pykubelet' in res.stderr
    assert "cgroupsPerQOS" not in res.stderr, "at the kubelet's default: accepted"
    assert not (tmp_path / "root" / "run").exists()


def test_up_refuses_a_host_its_config_rules_out_with_the_kubelets_words(tmp_path):
    from shared.config.settings import load_kubelet_config
    from shared.host.checks import startup_problems

    config = {"protectKernelDefaults": True, "failCgroupV1": True}
    expected = startup_problems(load_kubelet_config(config)[0])
    assert expected, "this host has cgroup v2 and the kernel tunables the kubelet wants: nothing to refuse here"
    cfg = tmp_path / "k.yaml"
    cfg.write_text("protectKernelDefaults: true\nfailCgroupV1: true\n")
    res = run("up", "--config", str(cfg), "--root-dir", str(tmp_path / "root"))
    assert res.returncode == 2 and "pykubelet up: not starting: " in res.stderr
    assert all(problem in res.stderr for problem in expected), res.stderr
    assert not (tmp_path / "root" / "run").exists()


def test_logging_format_json_makes_every_service_line_a_json_object(tmp_path):
    """logging.format json: each line a service writes is one JSON object with the kubelet's
    keys. The probe service is started against a bus that is not there; its first complaint is
    read and the service stopped."""
    import json

    cfg = tmp_path / "k.yaml"
    cfg.write_text("logging:\n  format: json\n  verbosity: 2\n")
    proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", "probe", "--config", str(cfg),
                             "--root-dir", str(tmp_path / "root"), "--nats-url", "nats://127.0.0.1:1",
                             # deprecated: warned about before the configuration is read
                             "--pod-manifest-path", str(tmp_path / "manifests")],
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    import threading

    deadline = threading.Timer(30, proc.kill)  # the loop below ends with the process
    deadline.start()
    try:
        lines = []
        for line in proc.stderr:
            lines.append(json.loads(line))  # every line, not only the one looked for
            if "event bus error" in lines[-1]["msg"]:
                break
    finally:
        deadline.cancel()
        proc.kill()
        proc.wait(timeout=30)
    assert lines and "event bus error" in lines[-1]["msg"], f"no complaint about the bus in 30s: {lines}"
    assert any(r["msg"].startswith("Flag --pod-manifest-path has been deprecated") and r["level"] == "warning"
               for r in lines), lines
    record = lines[-1]
    assert record["level"] == "warning" and record["service"] == "probe" and record["logger"] == "shared.bus.client"
    assert isinstance(record["ts"], float) and record["caller"].startswith("client.py:")


def test_kubelet_takes_the_kubelets_command_line_and_nothing_else(tmp_path):
    res = run("kubelet", "--version")
    assert res.returncode == 0 and res.stdout.strip() == "Kubernetes v1.37.2-pykubelet"
    # No abbreviations: kubeadm 1.20's --container-runtime=remote is not --container-runtime-endpoint.
    res = run("kubelet", "--container-runtime=remote", "--root-dir", str(tmp_path))
    assert res.returncode == 2 and "unrecognized arguments: --container-runtime=remote" in res.stderr
    res = run("kubelet", "--registry-port=5000", "--root-dir", str(tmp_path))
    assert res.returncode == 2 and "unrecognized arguments: --registry-port=5000" in res.stderr
    assert not (tmp_path / "run").exists()


def test_kubelet_refuses_a_bus_off_loopback_and_a_bad_config_before_starting_anything(tmp_path):
    root = tmp_path / "root"
    res = run("kubelet", "--nats-url=nats://0.0.0.0:4222", "--root-dir", str(root))
    assert res.returncode == 2 and "--nats-url nats://0.0.0.0:4222: the node's bus runs on loopback" in res.stderr
    cfg = tmp_path / "config.yaml"
    cfg.write_text("systemCgroups: /custom\n")
    res = run("kubelet", f"--config={cfg}", "--root-dir", str(root))
    assert res.returncode == 2 and res.stderr.startswith("pykubelet kubelet: ")
    assert 'systemCgroups: "/custom" is not implemented by pykubelet' in res.stderr
    assert not root.exists()


def test_up_and_kubelet_use_the_host_runtime_they_are_given(monkeypatch, tmp_path):
    from services.cli import up_cmd

    seen = {}

    async def fake_run_up(opts):
        seen[opts.settings.root_dir.name] = opts
        return 0

    monkeypatch.setattr(up_cmd, "run_up", fake_run_up)
    monkeypatch.setattr(up_cmd, "prepare_forker", lambda settings: None)
    monkeypatch.setattr(up_cmd, "startup_problems", lambda k: [])
    sock = "unix:///run/host-containerd/containerd.sock"
    assert up_cmd.up(["--root-dir", str(tmp_path / "own"), "--node-ip=192.0.2.7"]) == 0
    assert up_cmd.up(["--root-dir", str(tmp_path / "host"), f"--container-runtime-endpoint={sock}",
                      "--node-ip=192.0.2.7"]) == 0
    assert up_cmd.kubelet(["--root-dir", str(tmp_path / "kubelet"), f"--container-runtime-endpoint={sock}",
                           "--node-ip=192.0.2.7", "--nats-url=nats://127.0.0.1:4333"]) == 0
    own, host, kubelet = seen["own"], seen["host"], seen["kubelet"]
    assert own.runtime_endpoint is None and not own.keep_pods  # its own containerd, emptied at the stop
    assert host.runtime_endpoint == sock and host.keep_pods
    assert kubelet.runtime_endpoint == sock and kubelet.keep_pods and kubelet.nats_port == 4333
    assert kubelet.registry_port is None and not kubelet.push_images


def test_kubelet_keeps_its_state_where_the_kubelet_does(monkeypatch):
    from services.cli import up_cmd

    seen = []

    async def fake_run_up(opts):
        seen.append(opts.settings)
        return 0

    monkeypatch.setattr(up_cmd, "run_up", fake_run_up)
    monkeypatch.setattr(up_cmd, "prepare_forker", lambda settings: None)
    monkeypatch.setattr(up_cmd, "startup_problems", lambda k: [])
    monkeypatch.setattr(up_cmd, "root_dir", lambda path: path)  # nothing made under /var/lib here
    assert up_cmd.kubelet(["--node-ip=192.0.2.7"]) == 0
    [settings] = seen
    assert str(settings.root_dir) == "/var/lib/kubelet" and str(settings.cert_dir) == "/var/lib/kubelet/pki"
    assert settings.kubelet.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"


def test_up_refuses_a_cni_conf_dir_that_is_relative_climbs_or_has_no_containerd_to_configure(tmp_path):
    for hostile in ("etc/cni/net.d", "/etc/cni/../../root", "../net.d"):
        res = run("up", "--root-dir", str(tmp_path / "root"), "--cni-conf-dir", hostile)
        assert res.returncode == 2 and f"{hostile!r} is not an absolute path without '..'" in res.stderr, res.stderr
    res = run("up", "--root-dir", str(tmp_path / "root"), "--cni-conf-dir", "/etc/cni/net.d",
              "--container-runtime-endpoint=unix:///run/containerd/containerd.sock")
    assert res.returncode == 2 and "--cni-conf-dir sets where the node's own containerd reads" in res.stderr
    assert not (tmp_path / "root").exists(), "nothing was started or made"


def test_a_service_waiting_for_the_bus_stops_at_once_on_sigterm(tmp_path):
    """A stop asked while nats-server does not answer ends the wait: the service does not sit
    out the bus's connect timeout (about 30 s) before it exits."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", "probe", "--root-dir", str(tmp_path / "root"),
                             "--nats-url", "nats://127.0.0.1:1"], stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        for line in proc.stderr:  # once it is trying to reach the bus
            if "event bus error" in line:
                break
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=20)[1]
        took = time.monotonic() - asked
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, rest
    assert "probe stopped before the event bus at nats://127.0.0.1:1 answered" in rest
    assert took < 10, f"exited {took:.1f}s after SIGTERM"
