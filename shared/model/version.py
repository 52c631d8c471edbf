"""The Kubernetes version pykubelet speaks for: reported as the Node's kubeletVersion and, as
the kubelet does, in the probes' User-Agent (kube-probe/MAJOR.MINOR)."""

KUBELET_VERSION = "v1.37.2-pykubelet"
_MAJOR, _MINOR = KUBELET_VERSION.lstrip("v").split(".")[:2]
PROBE_USER_AGENT = f"kube-probe/{_MAJOR}.{_MINOR}"
# The one value showHiddenMetricsForVersion may take (component-base's rule).
PREVIOUS_MINOR = f"{_MAJOR}.{int(_MINOR) - 1}"


def version_line() -> str:
    """What `--version` prints, in the kubelet's words."""
    return f"Kubernetes {KUBELET_VERSION}"

# Node status.declaredFeatures (NodeDeclaredFeatures, GA in 1.37): the features of the kubelet's
# registry (k8s.io/component-helpers/nodedeclaredfeatures) this node implements, sorted. The API
# server admits a pod update that needs one (a resize of pod-level resources, or of an init
# container that is not a sidecar) only on a node that declares it, and the scheduler places a
# pod that needs one (a RestartAllContainers rule) only there.
DECLARED_FEATURES = ["InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers",
                     "RestartAllContainersOnContainerExits"]
