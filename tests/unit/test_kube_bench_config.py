"""`pykubelet kube-bench-config`: kube-bench's config with pykubelet's names first."""

from __future__ import annotations

import argparse
import shlex
import sys

import yaml

from services.cli import kube_bench_cmd
from services.cli.install_cmd import Installer

BASE = {"version_mapping": {"1.34": "cis-1.12"},
        "node": {"components": ["kubelet"],
                 "kubelet": {"bins": ["hyperkube kubelet", "kubelet"], "svc": ["/etc/systemd/system/kubelet.service"],
                             "confs": ["/var/lib/kubelet/config.yaml"], "cafile": ["/etc/kubernetes/pki/ca.crt"],
                             "kubeconfig": ["/etc/kubernetes/kubelet.conf"],
                             "defaultconf": "/var/lib/kubelet/config.yaml"}}}


def _run(tmp_path, capsys, *argv: str) -> tuple[int, str, str]:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(BASE))
    code = kube_bench_cmd.main(["--from", str(tmp_path / "config.yaml"), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_pykubelets_names_come_first_and_kube_benchs_stay(tmp_path, capsys):
    code, out, _ = _run(tmp_path, capsys, "--config-dir", "/etc/pk", "--unit-dir", "/units")
    assert code == 0
    doc = yaml.safe_load(out)
    kubelet = doc["node"]["kubelet"]
    assert kubelet["bins"] == ["pykubelet", "hyperkube kubelet", "kubelet"]
    assert kubelet["svc"] == ["/units/pykubelet-pod-sync.service", "/etc/systemd/system/kubelet.service"]
    assert kubelet["confs"][0] == "/etc/pk/config.yaml" and kubelet["defaultconf"] == "/etc/pk/config.yaml"
    assert kubelet["cafile"][0] == "/etc/pk/pki/ca.crt"
    assert kubelet["kubeconfig"] == ["/etc/kubernetes/kubelet.conf"], "no kubeconfig of install's: kube-bench's"
    assert doc["version_mapping"] == BASE["version_mapping"], "the rest is kube-bench's own"


def test_the_kubeconfig_install_was_given_is_found_in_flags_env(tmp_path, capsys):
    conf = tmp_path / "etc"
    args = argparse.Namespace(root_dir=str(tmp_path / "root"), config_dir=str(conf), unit_dir=str(tmp_path / "u"),
                              python=sys.executable, nats_port=4333, pod_manifest_path=str(tmp_path / "m"),
                              pod_cidr="", pod_infra_container_image="pause:3.9", kubeconfig="",
                              client_ca_file="", hostname_override="", node_ip="", rotate_bus_credentials=False)
    args.kubeconfig = "/srv/my node/kubelet.conf"  # a space survives both rounds of quoting
    conf.mkdir()
    # The line install writes (Installer.install), without the rest of an install.
    (conf / "flags.env").write_text("PYKUBELET_ARGS=" + shlex.quote(Installer(args).node_flags()) + "\n")
    assert kube_bench_cmd.installed_kubeconfig(conf) == "/srv/my node/kubelet.conf"
    code, out, _ = _run(tmp_path, capsys, "--config-dir", str(conf))
    kubelet = yaml.safe_load(out)["node"]["kubelet"]
    assert kubelet["kubeconfig"][0] == "/srv/my node/kubelet.conf"
    assert kubelet["defaultkubeconfig"] == "/srv/my node/kubelet.conf"


def test_a_file_that_is_not_kube_benchs_config_is_refused_naming_it(tmp_path, capsys):
    (tmp_path / "other.yaml").write_text("node: {kubelet: [1, 2]}\n")
    assert kube_bench_cmd.main(["--from", str(tmp_path / "other.yaml")]) == 2
    assert "other.yaml: it has no node.kubelet section" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("node: {kubelet: {bins: kubelet}}\n")
    assert kube_bench_cmd.main(["--from", str(tmp_path / "bad.yaml")]) == 2
    assert "node.kubelet.bins is not a list" in capsys.readouterr().err
    assert kube_bench_cmd.main(["--from", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
