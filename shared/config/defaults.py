"""The kubelet's defaulting of a zero value: what the config file's `0s`, `0` or `""` means.

In the kubelet's Go types most fields are plain values, so a zero there cannot be told from a
field left out, and its SetDefaults_KubeletConfiguration (1.37) replaces it with the default.
Tools write those zeros: kubeadm's config.yaml carries `syncFrequency: 0s`,
`runtimeRequestTimeout: 0s`, `containerRuntimeEndpoint: ""` and more. So a zero of one of these
fields is dropped before validation and the field takes pykubelet's (the kubelet's) default;
taken literally, a zero runtime timeout would fail every CRI call and a zero rescan period spin.
Fields the kubelet keeps as pointers (a zero there is a value: eventRecordQPS 0 means no limit)
are not listed and keep their zero.
"""

from __future__ import annotations

from typing import Any

from shared.model.durations import to_seconds

ZERO_IS_DEFAULT = (
    "syncFrequency", "fileCheckFrequency", "httpCheckFrequency", "address", "port",
    "authentication.webhook.cacheTTL", "authorization.mode", "authorization.webhook.cacheAuthorizedTTL",
    "authorization.webhook.cacheUnauthorizedTTL", "registryBurst", "eventBurst", "healthzBindAddress",
    "streamingConnectionIdleTimeout", "nodeStatusReportFrequency", "nodeStatusUpdateFrequency",
    "nodeLeaseDurationSeconds", "imageMinimumGCAge", "volumeStatsAggPeriod", "cgroupDriver", "cpuManagerPolicy",
    "cpuManagerReconcilePeriod", "memoryManagerPolicy", "topologyManagerPolicy", "topologyManagerScope",
    "runtimeRequestTimeout", "hairpinMode", "maxPods", "maxOpenFiles", "contentType", "kubeAPIBurst",
    "evictionPressureTransitionPeriod", "containerLogMaxSize", "configMapAndSecretChangeDetectionStrategy",
    "volumePluginDir", "memoryReservationPolicy", "containerRuntimeEndpoint", "podLogsDir",
    "imagePullCredentialsVerificationPolicy",
    # component-base's logging defaults (SetRecommendedLoggingConfiguration)
    "logging.format", "logging.flushFrequency",
)


def is_zero(value: Any) -> bool:
    if value is None or value == "":
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == 0
    if isinstance(value, str):
        try:
            return to_seconds(value) == 0
        except ValueError:
            return False
    return False


def drop_zero_values(data: dict[str, Any]) -> list[str]:
    """Remove from the config document every ZERO_IS_DEFAULT field at its zero (in place;
    nested sections copied first). Returns the fields removed."""
    # As the kubelet: no nodeStatusReportFrequency follows nodeStatusUpdateFrequency when that is set.
    update = data.get("nodeStatusUpdateFrequency")
    if is_zero(data.get("nodeStatusReportFrequency", "")) and not is_zero(update):
        data["nodeStatusReportFrequency"] = update
    dropped = []
    for name in ZERO_IS_DEFAULT:
        *parents, leaf = name.split(".")
        section: Any = data
        for p in parents:
            if not isinstance(section.get(p), dict):
                section = None
                break
            section[p] = dict(section[p])
            section = section[p]
        if isinstance(section, dict) and leaf in section and is_zero(section[leaf]):
            del section[leaf]
            dropped.append(name)
    return dropped
