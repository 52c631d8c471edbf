"""Bus credentials and permissions as files and a server config."""

from __future__ import annotations

import json
import os
import stat

import pytest

from shared.bus.auth import CredentialsError, publish_subjects, read_credentials, server_config, write_credentials
from shared.process.admin import SERVICES


def test_each_service_publishes_only_its_own_events():
    assert publish_subjects("network") == ["pykubelet.v1.network"]
    assert publish_subjects("eviction") == sorted(["pykubelet.v1.evictions", "pykubelet.v1.node.pressure", "pykubelet.v1.node.shutdown",
                                                   "pykubelet.v1.disk.reclaim.requested", "pykubelet.v1.events"])
    # node-api faces the network: it may say only that the log verbosity changed (PUT /debug/flags/v).
    assert publish_subjects("node-api") == ["pykubelet.v1.logging.verbosity"]
    assert "pykubelet.v1.events" not in publish_subjects("status-reporter")
    owned = [s for svc in SERVICES for s in publish_subjects(svc) if s != "pykubelet.v1.events"]
    assert len(owned) == len(set(owned)), "every subject but events has exactly one publisher"


def test_credentials_are_root_only_files(tmp_path):
    users = write_credentials(tmp_path / "bus", ["probe"])
    path = tmp_path / "bus" / "probe.json"
    assert stat.S_IMODE(os.stat(tmp_path / "bus").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_credentials(path) == users["probe"]
    assert len(users["probe"].password) >= 40


def test_unsafe_credentials_files_are_refused(tmp_path):
    write_credentials(tmp_path / "bus", ["probe"])
    path = tmp_path / "bus" / "probe.json"
    path.chmod(0o644)
    with pytest.raises(CredentialsError, match="can be read by others"):
        read_credentials(path)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with pytest.raises(CredentialsError, match="link.json"):
        read_credentials(link)
    path.chmod(0o600)
    path.write_text("user=probe")
    with pytest.raises(CredentialsError, match="expected JSON"):
        read_credentials(path)
    with pytest.raises(CredentialsError, match="pykubelet up does"):
        read_credentials(tmp_path / "missing.json")


def test_server_config_denies_everything_to_a_service_without_subjects(tmp_path):
    users = write_credentials(tmp_path / "bus", ["reader", "network"])  # reader: a user no event names
    text = server_config(4222, users)
    assert text.startswith("listen: 127.0.0.1:4222\n")
    lines = {json.loads(line.split("user: ")[1].split(",")[0]): line for line in text.splitlines() if "user:" in line}
    assert '"publish": {"deny": [">"]}' in lines["reader"]
    assert '"publish": ["pykubelet.v1.network"]' in lines["network"]
