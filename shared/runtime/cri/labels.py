"""Labels and annotations pykubelet puts on CRI objects, with the kubelet's keys.

Using the kubelet's keys means crictl and other tools show pods the familiar way, and the runtime
alone is enough to tell which pod and container an object belongs to after any restart.
"""

POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"
# Annotations
RESTART_COUNT = "io.kubernetes.container.restartCount"
TERMINATION_GRACE = "io.kubernetes.pod.terminationGracePeriod"
TERMINATION_MESSAGE_PATH = "io.kubernetes.container.terminationMessagePath"
TERMINATION_MESSAGE_POLICY = "io.kubernetes.container.terminationMessagePolicy"
INIT_CONTAINER = "pykubelet.io/init-container"
# The requests and limits (JSON) a container was created with: what an in-place resize starts from.
RESOURCES = "pykubelet.io/resources"
# What of the container's spec it was created from may change on a running pod (its image): a
# different value on a running container means "definition changed, restart it".
CONTAINER_HASH = "io.kubernetes.container.hash"
# Marks objects created by pykubelet, so it never touches anything else on a shared runtime.
MANAGED_BY = "pykubelet.io/managed"


def pod_log_dir(logs_root: str, namespace: str, name: str, uid: str) -> str:
    return f"{logs_root}/{namespace}_{name}_{uid}"


def container_log_path(container_name: str, attempt: int) -> str:
    """Relative to the pod log dir, as the kubelet lays it out."""
    return f"{container_name}/{attempt}.log"


def container_hash(image: str) -> str:
    import zlib

    return format(zlib.crc32(image.encode()), "x")
