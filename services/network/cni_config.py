"""The CNI network configuration for this node's pod CIDR.

bridge + host-local gives each pod an address from podCIDR behind a host bridge (reachable from
the node), portmap implements hostPort. containerd's CRI plugin reads the file from the conf dir.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
from pathlib import Path
from typing import Any

from shared.host.cni import BRIDGE, CONFLIST_NAME, NETWORK_NAME
from shared.host.node_dirs import private_dir


def conflist(pod_cidr: str, ipam_dir: Path, hairpin: bool = True) -> dict[str, Any]:
    """hairpin: the bridge port of each pod's veth in hairpin mode, so that a pod reaches itself
    through a service or a host port (hairpinMode promiscuous-bridge and hairpin-veth; none: not)."""
    net = ipaddress.ip_network(pod_cidr, strict=False)
    default_route = "0.0.0.0/0" if net.version == 4 else "::/0"
    return {
        "cniVersion": "0.4.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": hairpin,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(net)}]],
                    "routes": [{"dst": default_route}],
                    # Keep IP leases under pykubelet's root dir, not the host-wide default.
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


@functools.lru_cache(maxsize=4)
def _content(pod_cidr: str, ipam_dir: Path, hairpin: bool) -> str:
    # Checked against the file every few seconds: rendered once (json with an indent is encoded
    # in pure Python, ~1 ms a time).
    return json.dumps(conflist(pod_cidr, ipam_dir, hairpin), indent=2) + "\n"


def write_conflist(conf_dir: Path, pod_cidr: str, ipam_dir: Path, hairpin: bool = True) -> tuple[Path, bool]:
    """Write atomically; return (path, whether the content changed)."""
    private_dir(conf_dir)
    path = conf_dir / CONFLIST_NAME
    content = _content(pod_cidr, ipam_dir, hairpin)
    if path.exists() and path.read_text() == content:
        return path, False
    tmp = path.with_suffix(".tmp")
    tmp.write_text(content)
    os.replace(tmp, path)
    return path, True
