"""Where volumes live on the node: the kubelet's directory layout under the root dir.

    <root>/pods/<uid>/volumes/<plugin dir>/<volume name>          what containers bind-mount
    <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount       CSI publish target
    <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/vol_data.json
    <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount   CSI staging path
    <root>/plugins_registry/                                       plugin registration sockets

Keeping the kubelet's layout means tools and habits that know it (and reconstruction after a
restart, which reads only the disk) keep working.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from shared.host.safe_paths import beneath


# A plugin's directory name swaps "/" for "~" (the kubelet's layout).
def plugin_dir_name(plugin: str) -> str:
    return plugin.split(":", 1)[0].replace("/", "~")


class Layout:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.pods = root / "pods"
        self.plugins = root / "plugins"
        self.registry = root / "plugins_registry"

    # Every path built from a UID, a volume or driver name goes through beneath(): one component
    # each, never leading out of the root dir (UnsafePath otherwise).

    def pod_dir(self, uid: str) -> Path:
        return beneath(self.pods, uid)

    def volumes_dir(self, uid: str) -> Path:
        return beneath(self.pods, uid, "volumes")

    def volume_dir(self, uid: str, plugin: str, name: str) -> Path:
        return beneath(self.pods, uid, "volumes", plugin_dir_name(plugin), name)

    def csi_staging_dir(self, driver: str, volume_handle: str) -> Path:
        """Per (driver, volume): staged once, shared by every pod that publishes it."""
        digest = hashlib.sha256(volume_handle.encode()).hexdigest()
        return beneath(self.plugins, "kubernetes.io", "csi", driver, digest)

    def pod_uids_on_disk(self) -> set[str]:
        if not self.pods.is_dir():
            return set()
        return {p.name for p in self.pods.iterdir() if p.is_dir()}
