"""The bus's messages: one pydantic model per subject, each naming the services that may publish
it (shared/bus/auth.py turns that into NATS permissions). The publisher and every subscriber use
these models, so a malformed payload is refused where it enters. A message says what changed and
where to look; the state itself is in the store.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field, StringConstraints

from shared.model.podspec import POD_UID

SUBJECT_PREFIX = "pykubelet.v1"


# A payload names pods by UID, which services turn into paths (<root>/pods/<uid>): anything but
# one safe path component makes the whole message malformed, and it is dropped.
PodUID = Annotated[str, StringConstraints(pattern=POD_UID.pattern)]
MAX_UIDS = 10_000


class Event(BaseModel):
    """Base of all bus payloads; the subject carries the version."""

    subject: ClassVar[str]
    # The services allowed to publish it (shared.bus.auth turns this into NATS permissions).
    publishers: ClassVar[tuple[str, ...]] = ()
    sent_at: float = 0.0  # wall-clock seconds at publish, for the delivery-latency metric


class DesiredPodsChanged(Event):
    """pod-sync changed desired_pods (pods added, replaced or removed)."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.pods.desired"
    publishers: ClassVar[tuple[str, ...]] = ("pod-sync",)
    uids: list[PodUID] = Field(default_factory=list, max_length=MAX_UIDS)


class PodRuntimeChanged(Event):
    """pod-sync wrote new runtime observations for these pods."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.pods.runtime"
    publishers: ClassVar[tuple[str, ...]] = ("pod-sync",)
    uids: list[PodUID] = Field(default_factory=list, max_length=MAX_UIDS)


class ContainerEvent(BaseModel):
    pod_uid: PodUID
    container_id: str
    container_name: str
    type: str  # ContainerStarted, ContainerDied, ContainerRemoved (the kubelet's PLEG event types)


class PodLifecycleEvents(Event):
    """pod-sync's PLEG saw containers start, die or go away."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.pods.lifecycle"
    publishers: ClassVar[tuple[str, ...]] = ("pod-sync",)
    events: list[ContainerEvent] = []


class ProbeResultsChanged(Event):
    """probe wrote new results for these pods."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.probes.results"
    publishers: ClassVar[tuple[str, ...]] = ("probe",)
    uids: list[PodUID] = Field(default_factory=list, max_length=MAX_UIDS)


class KubeEvent(Event):
    """Something a user should see in `kubectl describe` (the kubelet's events). Best effort, as
    Kubernetes events are: a lost one is not re-sent."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.events"
    publishers: ClassVar[tuple[str, ...]] = ("pod-sync", "probe", "volume", "eviction")
    kind: str = "Pod"  # Pod or Node
    namespace: str = ""
    name: str = ""
    uid: PodUID | Literal[""] = ""
    type: str = "Normal"  # Normal or Warning
    reason: str = ""
    message: str = ""


class PodStatusChanged(Event):
    """status-reporter recomputed these pods' status."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.pods.status"
    publishers: ClassVar[tuple[str, ...]] = ("status-reporter",)
    uids: list[PodUID] = Field(default_factory=list, max_length=MAX_UIDS)


class MirrorPodsChanged(Event):
    """pod-sync's watch of this node's API pods saw a mirror pod added, changed or deleted:
    status-reporter, which keeps the mirror pods, looks again."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.pods.mirror"
    publishers: ClassVar[tuple[str, ...]] = ("pod-sync",)


class VolumesChanged(Event):
    """volume wrote pod_volumes rows for these pods (set up, failed, or torn down)."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.volumes"
    publishers: ClassVar[tuple[str, ...]] = ("volume",)
    uids: list[PodUID] = Field(default_factory=list, max_length=MAX_UIDS)


class RuntimeStatusChanged(Event):
    """pod-sync recorded a change in the runtime's status (node_health): RuntimeReady,
    NetworkReady, its version, PLEG health or its images."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.runtime.status"
    publishers: ClassVar[tuple[str, ...]] = ("pod-sync",)


class NetworkChanged(Event):
    """network wrote a new network_status row."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.network"
    publishers: ClassVar[tuple[str, ...]] = ("network",)
    ready: bool = False


class EvictionsDecided(Event):
    """eviction wrote pod_evictions rows for these pods: pod-sync stops them."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.evictions"
    publishers: ClassVar[tuple[str, ...]] = ("eviction",)
    uids: list[PodUID] = Field(default_factory=list, max_length=MAX_UIDS)


class NodePressureChanged(Event):
    """eviction changed a node_pressure row: the Node's conditions are to be reported now."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.node.pressure"
    publishers: ClassVar[tuple[str, ...]] = ("eviction",)


class NodeShutdownChanged(Event):
    """eviction began or ended a graceful node shutdown (node_shutdown): the Node's Ready
    condition is to be reported now."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.node.shutdown"
    publishers: ClassVar[tuple[str, ...]] = ("eviction",)


class DiskReclaimRequested(Event):
    """eviction wrote a reclaim_requests row: pod-sync frees disk and answers in disk_reclaim."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.disk.reclaim.requested"
    publishers: ClassVar[tuple[str, ...]] = ("eviction",)
    sequence: int = 0


class DiskReclaimed(Event):
    """pod-sync wrote a disk_reclaim row."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.disk.reclaimed"
    publishers: ClassVar[tuple[str, ...]] = ("pod-sync",)
    sequence: int = 0


class LogVerbosityChanged(Event):
    """node-api changed (or cleared) the node's run-time log verbosity (the log_verbosity row)."""

    subject: ClassVar[str] = f"{SUBJECT_PREFIX}.logging.verbosity"
    publishers: ClassVar[tuple[str, ...]] = ("node-api",)
