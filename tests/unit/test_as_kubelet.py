"""`pykubelet install --as-kubelet` (services/cli/as_kubelet.py): the kubelet binary, kubelet.service
and kubeadm's drop-in, in a scratch root; the script written is run for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli import as_kubelet, install_cmd
from services.cli.as_kubelet import DROP_IN, UNIT
from shared.model.version import version_line


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A scratch host: its package unit dir is empty unless a test puts a kubelet package there."""
    package = tmp_path / "lib/systemd/system"
    package.mkdir(parents=True)
    monkeypatch.setattr(as_kubelet, "PACKAGE_UNIT_DIRS", (str(package),))
    monkeypatch.setattr(install_cmd, "systemd_running", lambda: False)
    return tmp_path


def install(host: Path, *extra: str) -> int:
    return install_cmd.install(["--as-kubelet", "--kubelet-path", str(host / "usr/bin/kubelet"),
                                "--unit-dir", str(host / "etc/systemd/system"), *extra])


def test_the_kubelet_binary_written_runs_pykubelet_as_the_kubelet(host, capsys):
    assert install(host) == 0
    kubelet = host / "usr/bin/kubelet"
    assert os.stat(kubelet).st_mode & 0o777 == 0o755
    res = subprocess.run([str(kubelet), "--version"], capture_output=True, text=True, timeout=60, cwd="/")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == version_line()
    units = host / "etc/systemd/system"
    drop_in = (units / DROP_IN).read_text()
    assert f"ExecStart={kubelet} $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS " \
           "$KUBELET_EXTRA_ARGS" in drop_in
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in drop_in
    assert f"ExecStart={kubelet}\n" in (units / UNIT).read_text()
    out = capsys.readouterr().out
    assert f"wrote {kubelet}" in out and "kubeadm join" in out


def test_a_second_install_changes_nothing_and_uninstall_removes_it_all(host, capsys):
    install(host)
    capsys.readouterr()
    assert install(host) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert install_cmd.uninstall(["--as-kubelet", "--kubelet-path", str(host / "usr/bin/kubelet"),
                                  "--unit-dir", str(host / "etc/systemd/system")]) == 0
    assert not (host / "usr/bin/kubelet").exists()
    assert not (host / "etc/systemd/system" / UNIT).exists()
    assert not (host / "etc/systemd/system/kubelet.service.d").exists()


def test_a_kubelet_that_is_not_pykubelet_is_never_overwritten(host, capsys):
    kubelet = host / "usr/bin/kubelet"
    kubelet.parent.mkdir(parents=True)
    kubelet.write_bytes(b"\x7fELF the real kubelet")
    assert install(host) == 2
    err = capsys.readouterr().err
    assert f"{kubelet} is another program" in err and "move it aside" in err
    assert kubelet.read_bytes() == b"\x7fELF the real kubelet"
    assert not (host / "etc/systemd/system" / UNIT).exists(), "nothing written"
    install_cmd.uninstall(["--as-kubelet", "--kubelet-path", str(kubelet), "--unit-dir", str(host / "etc")])
    assert kubelet.exists(), "uninstall leaves what it did not write"


def test_a_symlink_in_the_kubelets_place_is_refused(host, capsys):
    kubelet = host / "usr/bin/kubelet"
    kubelet.parent.mkdir(parents=True)
    (host / "elsewhere").write_text("")
    kubelet.symlink_to(host / "elsewhere")
    assert install(host) == 2
    assert (host / "elsewhere").read_text() == "", "nothing written through the link"


def test_a_packaged_kubelet_service_is_kept_and_used(host, capsys):
    kubelet = host / "usr/bin/kubelet"
    package = host / "lib/systemd/system"
    (package / UNIT).write_text(f"[Service]\nExecStart={kubelet}\n")
    (package / "kubelet.service.d").mkdir()
    (package / DROP_IN).write_text(f"[Service]\nExecStart=\nExecStart={kubelet} $KUBELET_KUBEADM_ARGS\n")
    assert install(host) == 0
    out = capsys.readouterr().out
    assert f"kept {package / UNIT}" in out and f"kept {package / DROP_IN}" in out
    assert not (host / "etc/systemd/system" / UNIT).exists() and kubelet.exists()


def test_units_that_run_another_program_are_refused_naming_them(host, capsys):
    package = host / "lib/systemd/system"
    (package / UNIT).write_text("[Service]\nExecStart=/opt/bin/kubelet\n")
    assert install(host) == 2
    assert f"{package / UNIT} runs another program" in capsys.readouterr().err


def test_flags_of_the_unit_install_are_refused_with_as_kubelet(host, capsys):
    with pytest.raises(SystemExit) as exc:
        install(host, "--kubeconfig", "/etc/kubernetes/kubelet.conf")
    assert exc.value.code == 2
    assert "unrecognized arguments: --kubeconfig" in capsys.readouterr().err


def test_the_units_pass_systemd_analyze_verify(host):
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing (Debian: apt-get install systemd)"
    install(host)
    units = host / "etc/systemd/system"
    res = subprocess.run(["systemd-analyze", "verify", str(units / UNIT)], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:"})
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr


def test_the_script_runs_from_any_directory_with_its_own_interpreter(host):
    install(host, "--python", sys.executable)
    text = (host / "usr/bin/kubelet").read_text()
    assert text.startswith("#!/bin/sh\n") and f"{sys.executable} -m services.cli.main kubelet \"$@\"" in text
