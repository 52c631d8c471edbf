"""Host facts as the kubelet's cAdvisor reads them."""

from __future__ import annotations

from shared.host.facts import os_version


def test_the_os_version_is_the_pretty_name_quoted_or_not(tmp_path):
    release = tmp_path / "os-release"
    release.write_text('NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')
    assert os_version(str(release)) == "Debian GNU/Linux 12 (bookworm)"
    release.write_text("PRETTY_NAME=Alpine\n")
    assert os_version(str(release)) == "Alpine"


def test_without_a_pretty_name_the_os_is_unknown_as_cadvisor_says(tmp_path):
    release = tmp_path / "os-release"
    release.write_text("ID=custom\n")
    assert os_version(str(release)) == "Unknown"
    assert os_version(str(tmp_path / "absent")) == "Unknown"
