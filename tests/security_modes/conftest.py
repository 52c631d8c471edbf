"""A node started on a root dir an older pykubelet (umask 022) left behind: the root dir 0755,
service logs and the state store with its WAL and SHM 0644. Its own package: the security
package's node must not run at the same time, and this one needs a root dir made beforehand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.conftest import Node, launch_node, pods, stop_node  # noqa: F401

OLD_LOGS = ("pod-sync.log", "containerd.log")

# Writes a row in WAL mode and exits without closing: the -wal and -shm files stay, as after a crash.
_OLD_STORE = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE old_secrets (value TEXT)")
db.execute("INSERT INTO old_secrets VALUES ('password=hunter2')")
db.commit()
os._exit(0)
"""


def age_root_dir(root: Path) -> None:
    """What a root dir looks like after an older pykubelet ran with umask 022."""
    old = os.umask(0o022)
    try:
        root.chmod(0o755)
        (root / "logs").mkdir(mode=0o755)
        for name in OLD_LOGS:
            (root / "logs" / name).write_text("an older run's log: env PASSWORD=hunter2\n")
        subprocess.run([sys.executable, "-c", _OLD_STORE, str(root / "state.db")], check=True, timeout=30)
    finally:
        os.umask(old)
    for suffix in ("", "-wal", "-shm"):
        assert (root / f"state.db{suffix}").stat().st_mode & 0o777 == 0o644


@pytest.fixture(scope="package")
def node(tmp_path_factory) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("aged-root")
    age_root_dir(root)
    # enableServer false as well: a node without the kubelet API (test_file_modes.py checks it).
    n = launch_node(root, extra_config="enableServer: false\n")
    try:
        yield n
    finally:
        stop_node(n)
