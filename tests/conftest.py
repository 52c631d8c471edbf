"""Session-wide: a host fit for the test nodes before any of them starts (checked once the
session knows its tests, so that a run of unit tests alone is not held up by a node running here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.host.cni import BRIDGE
from tests import kube_build
from tests.host_iptables import remove_util_chains, util_chains_present
from tests.host_leftovers import TEARDOWN_TIMEOUT, clear_bridge

UNIT_TESTS = Path(__file__).parent / "unit"
VM_TESTS = Path(__file__).parent / "vm"  # a guest of their own: no node of this host, no control plane
# Whether this host's iptables had the kubelet's util chains before the session's nodes started
# (None: no node session, or not root).
_util_chains_before: bool | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    # Unit tests start no node: they run beside a node of this host.
    if all(Path(str(item.path)).is_relative_to(UNIT_TESTS) or Path(str(item.path)).is_relative_to(VM_TESTS)
           for item in session.items):
        return
    global _util_chains_before
    if os.geteuid() == 0:
        _util_chains_before = util_chains_present()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if kube_build.start_in_background() and reporter is not None:
        reporter.write_line(f"building the control plane in the background for the cluster tests "
                            f"(deploy/build-kube.sh, log in {kube_build.LOG})")
    if os.geteuid() != 0 or not Path(f"/sys/class/net/{BRIDGE}").exists():
        return
    found = clear_bridge(BRIDGE)
    if found.removed and reporter is not None:
        reporter.write_line(f"removed {len(found.removed)} pod network namespace(s) that a killed run left "
                            f"on bridge {BRIDGE}: {', '.join(found.removed)}")
    if found.stuck:
        pytest.exit(f"the kernel has not taken {', '.join(found.stuck)} off bridge {BRIDGE} "
                    f"{TEARDOWN_TIMEOUT} s after their namespaces were deleted; remove them with "
                    "`ip link delete NAME` and run the tests again.", returncode=3)
    if found.live:
        held = "; ".join(f"{name} (pids {', '.join(map(str, pids)) or 'unknown'})" for name, pids in found.live.items())
        pytest.exit(f"bridge {BRIDGE} carries pods of a node that is running on this host: {held}. Their "
                    "addresses collide with the test nodes' (same bridge, same pod CIDR): stop that node "
                    "(`make down`, or `pykubelet down --root-dir DIR`) and run the tests again.", returncode=3)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    kube_build.stop_background()
    if _util_chains_before is False:
        remove_util_chains()
