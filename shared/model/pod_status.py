"""The v1 PodStatus as pykubelet writes it: status-reporter computes it into pod_status.status
(services/status_reporter/pod_status.py) and sends it to the API; `pykubelet status`, node-api's
/pods and the mirror pods read it. pod-sync's resize conditions (pod_runtime.resize_conditions)
are PodConditions too. Field names are the API's; a field is absent when the kubelet leaves it
out. Times are RFC 3339 strings (shared/model/timestamps.py)."""

from __future__ import annotations

from typing import Any, TypedDict


class PodCondition(TypedDict, total=False):
    type: str
    status: str                 # "True", "False", "Unknown"
    lastProbeTime: str | None
    lastTransitionTime: str | None
    reason: str
    message: str
    observedGeneration: int


class ContainerStateWaiting(TypedDict, total=False):
    reason: str
    message: str


class ContainerStateRunning(TypedDict, total=False):
    startedAt: str | None


class ContainerStateTerminated(TypedDict, total=False):
    exitCode: int
    reason: str
    message: str
    startedAt: str | None
    finishedAt: str | None
    containerID: str | None


class ContainerState(TypedDict, total=False):
    """One of the three, or none (an empty lastState)."""

    waiting: ContainerStateWaiting
    running: ContainerStateRunning
    terminated: ContainerStateTerminated


class VolumeMountStatus(TypedDict, total=False):
    name: str
    mountPath: str
    readOnly: bool
    recursiveReadOnly: str      # read-only mounts: Disabled or Enabled


class ContainerStatus(TypedDict, total=False):
    name: str
    image: str
    imageID: str
    containerID: str
    restartCount: int
    ready: bool
    started: bool               # absent for ephemeral containers, which are never probed
    state: ContainerState
    lastState: ContainerState
    allocatedResources: dict[str, str]          # in-place resize: the requests the node granted
    resources: dict[str, dict[str, str]]        # what the running container has: limits, requests
    volumeMounts: list[VolumeMountStatus]
    user: dict[str, dict[str, Any]]             # {"linux": {"uid", "gid", "supplementalGroups"}}


class PodIP(TypedDict):
    ip: str


class PodStatus(TypedDict, total=False):
    phase: str                  # Pending, Running, Succeeded, Failed
    conditions: list[PodCondition]
    reason: str
    message: str
    hostIP: str
    hostIPs: list[PodIP]
    podIP: str | None
    podIPs: list[PodIP]
    startTime: str
    qosClass: str
    observedGeneration: int
    initContainerStatuses: list[ContainerStatus]
    containerStatuses: list[ContainerStatus]
    ephemeralContainerStatuses: list[ContainerStatus]
    # The pod-level requests the node granted, and what the pod cgroup has (pod-sync's
    # pod_resources_status.py).
    allocatedResources: dict[str, str]
    resources: dict[str, dict[str, str]]
