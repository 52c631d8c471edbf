"""KubeletConfiguration fields pykubelet does not implement: accepted only at the kubelet's default.

Every field of kubelet.config.k8s.io/v1beta1 (Kubernetes 1.37) is either implemented (a typed
field of shared.config.settings.KubeletConfiguration) or listed here with the kubelet 1.37 default and
what pykubelet does instead. A file that sets one of these to its default asks for nothing
pykubelet would have to do differently and is accepted; any other value stops the start with an
error naming the field, so a node never looks configured when it is not.

The defaults are those of the kubelet's SetDefaults_KubeletConfiguration (1.37); `None` means the
kubelet leaves the field unset, so only an absent or null value is the default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The json names of KubeletConfiguration's fields in k8s.io/kubelet v0.37.2
# (config/v1beta1/types.go), apiVersion and kind aside.
FIELDS = """enableServer staticPodPath podLogsDir syncFrequency fileCheckFrequency httpCheckFrequency
staticPodURL staticPodURLHeader address port readOnlyPort tlsCertFile tlsPrivateKeyFile tlsCipherSuites
tlsMinVersion tlsCurvePreferences rotateCertificates serverTLSBootstrap authentication authorization
registryPullQPS registryBurst imagePullCredentialsVerificationPolicy preloadedImagesVerificationAllowlist
eventRecordQPS eventBurst enableDebuggingHandlers enableContentionProfiling healthzPort healthzBindAddress
oomScoreAdj clusterDomain clusterDNS streamingConnectionIdleTimeout nodeStatusUpdateFrequency
nodeStatusReportFrequency nodeLeaseDurationSeconds imageMinimumGCAge imageMaximumGCAge
imageGCHighThresholdPercent imageGCLowThresholdPercent volumeStatsAggPeriod kubeletCgroups systemCgroups
cgroupRoot cgroupsPerQOS cgroupDriver cpuManagerPolicy singleProcessOOMKill cpuManagerPolicyOptions
cpuManagerReconcilePeriod memoryManagerPolicy topologyManagerPolicy topologyManagerScope
topologyManagerPolicyOptions qosReserved runtimeRequestTimeout hairpinMode maxPods podCIDR podPidsLimit
resolvConf runOnce cpuCFSQuota cpuCFSQuotaPeriod nodeStatusMaxImages maxOpenFiles contentType kubeAPIQPS
kubeAPIBurst serializeImagePulls maxParallelImagePulls evictionHard evictionSoft evictionSoftGracePeriod
evictionPressureTransitionPeriod evictionMaxPodGracePeriod evictionMinimumReclaim
mergeDefaultEvictionSettings podsPerCore enableControllerAttachDetach protectKernelDefaults
makeIPTablesUtilChains iptablesMasqueradeBit iptablesDropBit featureGates failSwapOn memorySwap
containerLogMaxSize containerLogMaxFiles containerLogMaxWorkers containerLogMonitorInterval
configMapAndSecretChangeDetectionStrategy systemReserved kubeReserved reservedSystemCPUs
showHiddenMetricsForVersion systemReservedCgroup kubeReservedCgroup enforceNodeAllocatable
allowedUnsafeSysctls defaultPodSysctls volumePluginDir providerID kernelMemcgNotification logging
enableSystemLogHandler enableSystemLogQuery shutdownGracePeriod shutdownGracePeriodCriticalPods
shutdownGracePeriodByPodPriority crashLoopBackOff reservedMemory enableProfilingHandler
enableDebugFlagsHandler seccompDefault memoryThrottlingFactor registerWithTaints registerNode tracing
localStorageCapacityIsolation containerRuntimeEndpoint imageServiceEndpoint failCgroupV1 userNamespaces
memoryReservationPolicy""".split()


@dataclass(frozen=True)
class Refused:
    default: Any
    instead: str          # what pykubelet does, for the error message and the docs table
    also: tuple[Any, ...] = ()  # other values taken too: what pykubelet does anyway


_CGROUPS = "every pod has its own cgroup below the kubelet's QoS tiers (/kubepods, /kubepods/burstable, /kubepods/besteffort)"
REFUSED: dict[str, Refused] = {
    "enableContentionProfiling": Refused(False, "there is no profiling handler"),
    "systemCgroups": Refused("", "system processes are not moved"),
    "cgroupsPerQOS": Refused(True, _CGROUPS),
    "contentType": Refused("application/vnd.kubernetes.protobuf", "pykubelet speaks JSON to the API server",
                           also=("application/json",)),
    "enableControllerAttachDetach": Refused(True, "attach and detach are the controller's (CSI node calls only)"),
    "volumePluginDir": Refused("/usr/libexec/kubernetes/kubelet-plugins/volume/exec/",
                               "no FlexVolume plugins; CSI plugins register in <root-dir>/plugins_registry"),
}


def _same(value: Any, default: Any) -> bool:
    if value is None:
        return True  # null is "not set"
    if isinstance(default, dict):
        # A partial mapping is at the default when each key it gives is.
        return isinstance(value, dict) and all(k in default and _same(v, default[k]) for k, v in value.items())
    if isinstance(default, list):
        return bool(value == default)
    if default is None:
        return False
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value) == default
    # bool is an int in Python: `true` is not the default of a number field, nor 1 of a bool one.
    return type(value) is type(default) and bool(value == default)


def shown(value: Any) -> str:
    """A value as the YAML/JSON file spells it."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def refused_settings(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the errors for refused fields set to something else than the kubelet's default, the
    refused fields given at their default)."""
    errors, at_default = [], []
    for name in sorted(k for k in data if k in REFUSED):
        field = REFUSED[name]
        if _same(data[name], field.default) or data[name] in field.also:
            at_default.append(name)
            continue
        default = "unset" if field.default is None else shown(field.default)
        also = "".join(f" or to {shown(v)}" for v in field.also)
        errors.append(f"{name}: {shown(data[name])} is not implemented by pykubelet ({field.instead}); remove the "
                      f"field or set it to the kubelet's default ({default}){also}")
    return errors, at_default
