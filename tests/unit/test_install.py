"""`pykubelet install` / `uninstall` into temporary directories, and every unit it writes checked
by systemd-analyze verify."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys

import pytest

from services.cli.install_cmd import STRONG_CIPHER_SUITES, Installer, InstallError, unit_names
from shared.api.self_signed import write_self_signed
from shared.config.settings import load_kubelet_config, safe_yaml
from shared.process.admin import SERVICES


@pytest.fixture
def args(tmp_path):
    return argparse.Namespace(root_dir=str(tmp_path / "root"), config_dir=str(tmp_path / "etc"),
                              unit_dir=str(tmp_path / "units"), python=sys.executable, nats_port=4333,
                              pod_manifest_path=str(tmp_path / "manifests"), pod_cidr="10.88.0.0/24",
                              pod_infra_container_image="127.0.0.1:5000/pykubelet/pause:3.9", kubeconfig="",
                              client_ca_file="", hostname_override="node-a", node_ip="192.0.2.7",
                              rotate_bus_credentials=False)


def test_install_writes_units_config_and_private_credentials(args, tmp_path):
    Installer(args).install()
    units = tmp_path / "units"
    assert sorted(os.listdir(units)) == unit_names()
    assert {f"pykubelet-{s}.service" for s in SERVICES} <= set(unit_names())
    probe = (units / "pykubelet-probe.service").read_text()
    assert "@" not in probe.replace("@system-service", ""), "every placeholder filled"
    assert f"LoadCredential=bus:{tmp_path}/etc/bus/probe.json" in probe
    assert "nats://127.0.0.1:4333" in probe and sys.executable in probe
    config = (tmp_path / "etc" / "config.yaml").read_text()
    assert "kind: KubeletConfiguration" in config and f"staticPodPath: {tmp_path}/manifests" in config
    assert (tmp_path / "etc" / "flags.env").read_text().endswith(
        "PYKUBELET_ARGS='--hostname-override=node-a --node-ip=192.0.2.7'\n")
    bus = tmp_path / "etc" / "bus"
    assert stat.S_IMODE(os.stat(bus).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in bus.iterdir())
    assert "listen: 127.0.0.1:4333" in (bus / "nats.conf").read_text()
    containerd = (tmp_path / "root" / "containerd" / "config.toml").read_text()
    assert 'sandbox_image = "127.0.0.1:5000/pykubelet/pause:3.9"' in containerd
    written = [*units.iterdir(), tmp_path / "etc" / "config.yaml", tmp_path / "etc" / "flags.env",
               tmp_path / "root" / "containerd" / "config.toml"]
    assert {f.name: oct(stat.S_IMODE(os.stat(f).st_mode)) for f in written} == \
        {f.name: "0o600" for f in written}, "root's alone (CIS 4.1.1, 4.1.5, 4.1.9)"


def test_install_is_idempotent_and_keeps_what_the_operator_owns(args, tmp_path):
    Installer(args).install()
    passwords = (tmp_path / "etc" / "bus" / "probe.json").read_text()
    (tmp_path / "etc" / "config.yaml").write_text("# mine\nkind: KubeletConfiguration\n")
    again = Installer(args)
    again.install()
    assert again.changed == [], "a second install changes nothing"
    assert (tmp_path / "etc" / "bus" / "probe.json").read_text() == passwords, "running services keep working"
    assert (tmp_path / "etc" / "config.yaml").read_text().startswith("# mine")
    args.rotate_bus_credentials = True
    rotated = Installer(args)
    rotated.install()
    assert (tmp_path / "etc" / "bus" / "probe.json").read_text() != passwords


def test_uninstall_removes_what_install_wrote(args, tmp_path):
    Installer(args).install()
    (tmp_path / "root" / "state.db").write_text("pods")
    removed = Installer(args).uninstall()
    assert os.listdir(tmp_path / "units") == []
    assert not (tmp_path / "etc").exists()
    assert (tmp_path / "root" / "state.db").exists(), "the node's state is left"
    assert str(tmp_path / "etc" / "bus") in removed


def test_every_unit_passes_systemd_analyze_verify(args, tmp_path):
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing (Debian: apt-get install systemd)"
    Installer(args).install()
    units = tmp_path / "units"
    res = subprocess.run(["systemd-analyze", "verify", *sorted(str(p) for p in units.iterdir())],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"})
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr


def test_sandboxing_keeps_the_code_reachable(monkeypatch):
    from services.cli import install_cmd

    monkeypatch.setattr(install_cmd, "SRC", install_cmd.Path("/opt/pykubelet/src"))
    assert (install_cmd.protect_home("/usr/bin/python3"), install_cmd.private_tmp("/usr/bin/python3")) == ("yes", "yes")
    monkeypatch.setattr(install_cmd, "SRC", install_cmd.Path("/var/tmp/checkout"))
    assert install_cmd.private_tmp("/usr/bin/python3") == "no", "a checkout in /var/tmp stays visible"
    monkeypatch.setattr(install_cmd, "SRC", install_cmd.Path("/root/pykubelet"))
    assert install_cmd.protect_home("/usr/bin/python3") == "read-only"


def _kubeconfig(tmp_path, cluster: str) -> str:
    path = tmp_path / "kubelet.conf"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://192.0.2.1:6443"{cluster}}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return str(path)


def test_the_first_config_states_the_cis_settings_and_pykubelet_takes_it(args, tmp_path):
    """The first config.yaml spells out the CIS benchmark's worker-node settings (4.2.x), and
    names a serving certificate made for the node and the kubeconfig's cluster CA."""
    write_self_signed(tmp_path / "ca.crt", tmp_path / "ca.key", "kubernetes", [])
    args.kubeconfig = _kubeconfig(tmp_path, f", certificate-authority: {tmp_path}/ca.crt")
    Installer(args).install()
    text = (tmp_path / "etc" / "config.yaml").read_text()
    doc = safe_yaml.load(text)
    cfg, warnings = load_kubelet_config(doc, "config.yaml")
    assert warnings == []
    assert cfg.authentication.anonymous.enabled is False and cfg.authorization.mode == "Webhook"
    assert (cfg.read_only_port, cfg.pod_pids_limit, cfg.seccomp_default) == (0, 4096, True)
    assert cfg.tls_cipher_suites == STRONG_CIPHER_SUITES
    ca = tmp_path / "etc" / "pki" / "ca.crt"
    assert cfg.authentication.x509.client_ca_file == str(ca)
    assert ca.read_text() == (tmp_path / "ca.crt").read_text()
    assert oct(stat.S_IMODE(os.stat(ca).st_mode)) == "0o644", "a CA is public (CIS 4.1.7: 644 or stricter)"
    cert = tmp_path / "root" / "pki" / "kubelet.crt"
    assert (cfg.tls_cert_file, cfg.tls_private_key_file) == (str(cert), str(tmp_path / "root" / "pki" / "kubelet.key"))
    from cryptography import x509

    names = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert "node-a" in names.get_values_for_type(x509.DNSName)
    assert "192.0.2.7" in {str(a) for a in names.get_values_for_type(x509.IPAddress)}
    assert oct(stat.S_IMODE(os.stat(tmp_path / "root" / "pki" / "kubelet.key").st_mode)) == "0o600"
    # Uninstall takes the CA it copied; the node's certificate stays with its state.
    Installer(args).uninstall()
    assert not (tmp_path / "etc").exists() and cert.exists()


def test_a_standalone_node_names_no_client_ca_and_a_given_one_is_used_as_it_is(args, tmp_path):
    Installer(args).install()
    cfg, _ = load_kubelet_config(safe_yaml.load((tmp_path / "etc" / "config.yaml").read_text()))
    assert cfg.authentication.x509.client_ca_file == ""
    (tmp_path / "etc" / "config.yaml").unlink()
    write_self_signed(tmp_path / "mine.crt", tmp_path / "mine.key", "ca", [])
    args.client_ca_file = str(tmp_path / "mine.crt")
    Installer(args).install()
    cfg, _ = load_kubelet_config(safe_yaml.load((tmp_path / "etc" / "config.yaml").read_text()))
    assert cfg.authentication.x509.client_ca_file == str(tmp_path / "mine.crt")
    assert not (tmp_path / "etc" / "pki").exists()


@pytest.mark.parametrize("setup, error", [
    (lambda tmp: {"kubeconfig": str(tmp / "missing.conf")}, "missing.conf: no such file"),
    (lambda tmp: {"kubeconfig": _kubeconfig(tmp, "")}, "names no certificate-authority for its cluster"),
    (lambda tmp: {"kubeconfig": _kubeconfig(tmp, ", certificate-authority-data: bm90IGEgY2VydA==")},
     "certificate-authority-data"),
    (lambda tmp: {"client_ca_file": "ca.crt"}, "--client-ca-file ca.crt: not an absolute path to a file"),
    (lambda tmp: {"client_ca_file": str(tmp)}, "not an absolute path to a file"),
])
def test_a_client_ca_install_cannot_use_is_refused_naming_it(args, tmp_path, setup, error):
    for key, value in setup(tmp_path).items():
        setattr(args, key, value)
    with pytest.raises(InstallError, match=error):
        Installer(args).install()
    assert not (tmp_path / "etc" / "config.yaml").exists(), "no config naming what is not there"
    assert not (tmp_path / "units").exists(), "and no unit that would start a node without it"


def test_the_cgroup_driver_goes_to_config_yaml_and_containerd_follows_it(args, tmp_path):
    args.cgroup_driver = "systemd"
    Installer(args).install()
    assert load_kubelet_config(safe_yaml.load((tmp_path / "etc" / "config.yaml").read_text()))[0].cgroup_driver \
        == "systemd"
    containerd = tmp_path / "root" / "containerd" / "config.toml"
    assert "SystemdCgroup = true" in containerd.read_text()
    # The operator's config.yaml decides from then on: containerd follows an edit of it.
    config = tmp_path / "etc" / "config.yaml"
    config.write_text(config.read_text().replace("cgroupDriver: systemd", "cgroupDriver: cgroupfs"))
    args.cgroup_driver = ""
    Installer(args).install()
    assert "SystemdCgroup = false" in containerd.read_text()
    args.cgroup_driver = "systemd"
    with pytest.raises(InstallError, match="says cgroupDriver: cgroupfs, not systemd: edit the file"):
        Installer(args).install()


def test_without_a_driver_asked_the_host_decides(args, tmp_path, monkeypatch):
    monkeypatch.setattr("services.cli.install_cmd.systemd_running", lambda: False)
    Installer(args).install()
    assert "cgroupDriver: cgroupfs" in (tmp_path / "etc" / "config.yaml").read_text()


def test_the_service_units_carry_config_yamls_oom_score_and_open_files_limit(args, tmp_path):
    """The services have no CAP_SYS_RESOURCE: systemd gives them oomScoreAdj and maxOpenFiles."""
    Installer(args).install()
    units = tmp_path / "units"
    for s in SERVICES:
        text = (units / f"pykubelet-{s}.service").read_text()
        assert "OOMScoreAdjust=-999\n" in text and "LimitNOFILE=1000000\n" in text, s
    config = tmp_path / "etc" / "config.yaml"
    config.write_text(config.read_text() + "oomScoreAdj: -500\nmaxOpenFiles: 65536\n")
    Installer(args).install()
    probe = (units / "pykubelet-probe.service").read_text()
    assert "OOMScoreAdjust=-500\n" in probe and "LimitNOFILE=65536\n" in probe
    config.write_text(config.read_text().replace("oomScoreAdj: -500", "oomScoreAdj: -5000"))
    with pytest.raises(InstallError, match=r"oomScoreAdj \(--oom-score-adj\) -5000 must be between"):
        Installer(args).install()
    assert "OOMScoreAdjust=-500\n" in (units / "pykubelet-probe.service").read_text(), "no unit rewritten"
