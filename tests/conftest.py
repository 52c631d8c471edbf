"""Session-wide: a host fit for the test nodes before any of them starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.cni import BRIDGE
from tests.host_leftovers import clear_bridge


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.geteuid() != 0 or not Path(f"/sys/class/net/{BRIDGE}").exists():
        return
    found = clear_bridge(BRIDGE)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if found.removed and reporter is not None:
        reporter.write_line(f"removed {len(found.removed)} pod network namespace(s) that a killed run left "
                            f"on bridge {BRIDGE}: {', '.join(found.removed)}")
    if found.live:
        held = "; ".join(f"{name} (pids {', '.join(map(str, pids)) or 'unknown'})" for name, pids in found.live.items())
        pytest.exit(f"bridge {BRIDGE} carries pods of a node that is running on this host: {held}. Their "
                    "addresses collide with the test nodes' (same bridge, same pod CIDR): stop that node "
                    "(`make down`, or `pykubelet down --root-dir DIR`) and run the tests again.", returncode=3)
