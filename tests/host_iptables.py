"""The kubelet's iptables util chains (services/network/iptables_chains.py) that the test nodes
make in this host's iptables, as every kubelet does: removed when the session ends if they were
not there when it began, so a test run leaves the host's firewall as it found it."""

from __future__ import annotations

import shutil
import subprocess

from services.network.iptables_chains import CANARY_CHAIN, CANARY_TABLES, FIREWALL_CHAIN, HINT_CHAIN


def _iptables(binary: str, *args: str) -> bool:
    try:
        return subprocess.run([binary, "-w", "5", *args], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def util_chains_present() -> bool:
    return shutil.which("iptables") is None or _iptables("iptables", "-t", "mangle", "-S", HINT_CHAIN)


def remove_util_chains() -> None:
    if shutil.which("iptables") is not None:
        for chain in ("INPUT", "OUTPUT"):
            while _iptables("iptables", "-D", chain, "-j", FIREWALL_CHAIN):
                pass
        _iptables("iptables", "-F", FIREWALL_CHAIN)
        _iptables("iptables", "-X", FIREWALL_CHAIN)
    for binary in ("iptables", "ip6tables"):
        if shutil.which(binary) is None:
            continue
        _iptables(binary, "-t", "mangle", "-X", HINT_CHAIN)
        for table in CANARY_TABLES:
            _iptables(binary, "-t", table, "-X", CANARY_CHAIN)
