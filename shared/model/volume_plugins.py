"""The kubelet's volume plugin names: what pod_volumes rows carry (the volume service writes them;
eviction and node-api read them) and what <root>/pods/<uid>/volumes/ is divided by."""

from __future__ import annotations

EMPTY_DIR = "kubernetes.io/empty-dir"
HOST_PATH = "kubernetes.io/host-path"
CONFIG_MAP = "kubernetes.io/configmap"
SECRET = "kubernetes.io/secret"
DOWNWARD_API = "kubernetes.io/downward-api"
PROJECTED = "kubernetes.io/projected"
CSI = "kubernetes.io/csi"
# Nothing on the host: the runtime mounts the image itself (its row has no host path).
IMAGE = "kubernetes.io/image"

# A pod's volume source (its field in the Volume) -> the plugin that sets it up.
PLUGINS = {
    "emptyDir": EMPTY_DIR,
    "hostPath": HOST_PATH,
    "configMap": CONFIG_MAP,
    "secret": SECRET,
    "downwardAPI": DOWNWARD_API,
    "projected": PROJECTED,
    "csi": CSI,
    "persistentVolumeClaim": CSI,
    "image": IMAGE,
}
