"""What the host shows of a pod's network: the bridge port of its veth."""

from __future__ import annotations

from pathlib import Path

from shared.host.cni import BRIDGE

SYS_NET = Path("/sys/class/net")


def bridge_port(node, uid: str, container: str) -> Path:
    """The pod's veth on pykubelet's bridge (/sys/class/net/BRIDGE/brif/PORT): the host end
    whose ifindex is the pod's eth0's iflink."""
    code, out = node.exec(uid, container, ["cat", "/sys/class/net/eth0/iflink"])
    assert code == 0, f"cannot read the pod's eth0 iflink: {out}"
    ports = list((SYS_NET / BRIDGE / "brif").iterdir())
    for port in ports:
        if (SYS_NET / port.name / "ifindex").read_text().strip() == out.strip():
            return port
    raise AssertionError(f"no port of {BRIDGE} has ifindex {out.strip()} (ports: {[p.name for p in ports]})")


def hairpin_mode(node, uid: str, container: str) -> str:
    """The kernel's hairpin_mode of the pod's bridge port: "1" on, "0" off."""
    return (bridge_port(node, uid, container) / "hairpin_mode").read_text().strip()
