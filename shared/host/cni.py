"""Where the node's CNI configuration lives and what it is called.

The network service writes the config; the supervisor points containerd at the same directory
and removes the bridge when a local node stops.
"""

from pathlib import Path

NETWORK_NAME = "pykubelet"
BRIDGE = "pykube0"
CNI_BIN_DIR = "/usr/lib/cni"
# The network config pykubelet writes for its pod CIDR (services/network/cni_config.py).
CONFLIST_NAME = "10-pykubelet.conflist"


def cni_conf_dir(root_dir: Path) -> Path:
    return root_dir / "cni" / "net.d"


def cni_ipam_dir(root_dir: Path) -> Path:
    return root_dir / "cni" / "ipam"
