"""Tables of the state store. Each table names the one service allowed to write it."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, TypedDict

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from shared.model.allocation import Allocation, Resources
from shared.model.pod_status import PodCondition, PodStatus
from shared.store.observed import ObservedContainer


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


# The sources of static pods, as the kubelet's kubernetes.io/config.source names them: the
# manifest directory (staticPodPath) and the manifest URL (staticPodURL).
STATIC_SOURCES = ("file", "http")


def is_static(source: str) -> bool:
    return source in STATIC_SOURCES


class ResizeCondition(TypedDict, total=False):
    """A PodResizePending or PodResizeInProgress condition while it holds, as pod-sync keeps it."""

    reason: str
    message: str
    generation: int | None  # the pod's metadata.generation it is about
    since: str              # RFC 3339: its lastTransitionTime


class ResizeConditions(TypedDict, total=False):
    pending: ResizeCondition | None
    in_progress: ResizeCondition | None


class DesiredPod(Base):
    """A pod this node should run, as its source (manifest file, API) gave it."""

    __tablename__ = "desired_pods"
    uid: Mapped[str] = mapped_column(String, primary_key=True)
    namespace: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String)
    source: Mapped[str] = mapped_column(String)  # "file" or "http" (static pods: STATIC_SOURCES) or "api"
    source_path: Mapped[str] = mapped_column(String, default="")
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)  # the defaulted v1 Pod
    # Set when the source no longer has the pod: pod-sync stops it within the grace period,
    # then deletes the row. Until then the pod shows as terminating.
    deleting: Mapped[bool] = mapped_column(Boolean, default=False)
    grace_period_seconds: Mapped[int] = mapped_column(Integer, default=30)
    # API pods: nothing of the pod runs any more (status-reporter may delete the API object),
    # and whether the API object is already gone.
    terminated: Mapped[bool] = mapped_column(Boolean, default=False)
    api_deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    # Failed for good (evicted, past activeDeadlineSeconds) and nothing of it runs: its volumes
    # may go (emptyDirs give their disk back), while the pod and its status stay until deleted.
    finished: Mapped[bool] = mapped_column(Boolean, default=False)
    # Admission is decided once: admitted pods stay admitted, rejected ones stay Failed.
    admitted: Mapped[bool] = mapped_column(Boolean, default=False)
    rejection_reason: Mapped[str] = mapped_column(String, default="")
    # The CPUs of their own its containers got at admission (cpuManagerPolicy static), by
    # container name, as CPU lists ("2-3"); empty when none did.
    exclusive_cpus: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    rejection_message: Mapped[str] = mapped_column(Text, default="")
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # In-place resize (services/pod_sync/resize.py), pod-sync's: the resources granted per
    # container name (None until admitted), those UpdateContainerResources applied per container
    # ID, and the pending / in-progress resize conditions' state.
    allocated: Mapped[Allocation | None] = mapped_column(JSON, nullable=True, default=None)
    actuated: Mapped[dict[str, Resources]] = mapped_column(JSON, default=dict)
    resize: Mapped[ResizeConditions] = mapped_column(JSON, default=dict)
    # RestartAllContainers (shared/model/restart_rules.py), pod-sync's: when it last stopped
    # every container of the pod for one (wall-clock seconds, before the first stop); the
    # containers created before then are only the history of those that run again.
    restarted_all_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)


class ManifestError(Base):
    """A pod source entry that could not be turned into a pod, and why."""

    __tablename__ = "manifest_errors"
    source_path: Mapped[str] = mapped_column(String, primary_key=True)
    error: Mapped[str] = mapped_column(Text)
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RefusedPod(Base):
    """An API pod bound to this node that pykubelet cannot run as written (a field it refuses):
    reported Failed with the reason, never started. Gone with the API object."""

    __tablename__ = "refused_pods"
    uid: Mapped[str] = mapped_column(String, primary_key=True)
    namespace: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String)
    reason: Mapped[str] = mapped_column(String)
    message: Mapped[str] = mapped_column(Text)
    # The API object is being deleted: nothing runs, so status-reporter removes it at once.
    deleting: Mapped[bool] = mapped_column(Boolean, default=False)
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PodRuntime(Base):
    """What the container runtime has for a pod, plus why pod-sync could not go further."""

    __tablename__ = "pod_runtime"
    uid: Mapped[str] = mapped_column(String, primary_key=True)
    sandbox_id: Mapped[str] = mapped_column(String, default="")
    sandbox_ready: Mapped[bool] = mapped_column(Boolean, default=False)
    pod_ip: Mapped[str] = mapped_column(String, default="")
    log_dir: Mapped[str] = mapped_column(String, default="")
    # One entry per spec container (shared/store/observed.py).
    containers: Mapped[list[ObservedContainer]] = mapped_column(JSON, default=list)
    sync_error_reason: Mapped[str] = mapped_column(String, default="")
    sync_error_message: Mapped[str] = mapped_column(Text, default="")
    # The pod's metadata.generation this record is of, and its PodResizePending /
    # PodResizeInProgress conditions (v1 PodConditions) while a resize is under way.
    observed_generation: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    resize_conditions: Mapped[list[PodCondition]] = mapped_column(JSON, default=list)
    # The pod-level status.allocatedResources and status.resources
    # (services/pod_sync/pod_resources_status.py); empty before pod-sync first recorded the pod.
    pod_resources: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PodStatusRecord(Base):
    """The v1 PodStatus of a pod as the kubelet would report it."""

    __tablename__ = "pod_status"
    uid: Mapped[str] = mapped_column(String, primary_key=True)
    namespace: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String)
    source: Mapped[str] = mapped_column(String)
    phase: Mapped[str] = mapped_column(String)
    pod_ip: Mapped[str] = mapped_column(String, default="")
    status: Mapped[PodStatus] = mapped_column(JSON)  # shared/model/pod_status.py
    # In words, why the pod is not (yet) running as asked; empty when all is well.
    summary: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class NetworkStatus(Base):
    """The node's pod network: CNI config written and the runtime reporting it ready."""

    __tablename__ = "network_status"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    pod_cidr: Mapped[str] = mapped_column(String, default="")
    ready: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str] = mapped_column(String, default="")
    message: Mapped[str] = mapped_column(Text, default="")
    conf_path: Mapped[str] = mapped_column(String, default="")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class NodeHealth(Base):
    """pod-sync's view of the node's runtime: what node readiness is made of, the runtime's
    NetworkReady condition, which the network service reports from here (one runtime status
    check for the node, as the kubelet's), and the runtime's images for the Node's status."""

    __tablename__ = "node_health"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    runtime_ready: Mapped[bool] = mapped_column(Boolean, default=False)
    runtime_message: Mapped[str] = mapped_column(Text, default="")
    runtime_version: Mapped[str] = mapped_column(String, default="")
    # What the runtime's Status call reports of its handlers and features, as the Node's
    # status.runtimeHandlers and status.features (JSON; "" while the runtime reports no features).
    runtime_handlers: Mapped[str] = mapped_column(Text, default="[]")
    runtime_features: Mapped[str] = mapped_column(Text, default="")
    # The runtime's images as the Node's status.images lists them (JSON: names and sizeBytes,
    # largest first), every image; status-reporter keeps nodeStatusMaxImages of them.
    images: Mapped[str] = mapped_column(Text, default="[]")
    network_ready: Mapped[bool] = mapped_column(Boolean, default=False)
    network_message: Mapped[str] = mapped_column(Text, default="")
    pleg_healthy: Mapped[bool] = mapped_column(Boolean, default=False)
    pleg_message: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ProbeResult(Base):
    """The current result of one probe of one container instance."""

    __tablename__ = "probe_results"
    pod_uid: Mapped[str] = mapped_column(String, primary_key=True)
    container_name: Mapped[str] = mapped_column(String, primary_key=True)
    kind: Mapped[str] = mapped_column(String, primary_key=True)  # liveness, readiness, startup
    container_id: Mapped[str] = mapped_column(String)
    result: Mapped[str] = mapped_column(String)  # Success, Failure, Unknown
    message: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PodVolume(Base):
    """One volume of one pod as the volume service set it up: where it is on the host, and
    whether containers may start with it."""

    __tablename__ = "pod_volumes"
    pod_uid: Mapped[str] = mapped_column(String, primary_key=True)
    name: Mapped[str] = mapped_column(String, primary_key=True)  # the pod's volume name
    plugin: Mapped[str] = mapped_column(String)  # kubernetes.io/empty-dir, kubernetes.io/csi:<driver>...
    host_path: Mapped[str] = mapped_column(Text, default="")  # what containers bind-mount
    ready: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str] = mapped_column(String, default="")  # FailedMount, FailedAttachVolume
    message: Mapped[str] = mapped_column(Text, default="")
    # emptyDir only: its sizeLimit (0: none) and what it holds, measured every
    # volumeStatsAggPeriod, for eviction to compare.
    size_limit_bytes: Mapped[int] = mapped_column(Integer, default=0)
    used_bytes: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SignalObservation(Base):
    """One eviction signal as last measured, with its thresholds: what `pykubelet status` and the
    eviction view show."""

    __tablename__ = "eviction_signals"
    signal: Mapped[str] = mapped_column(String, primary_key=True)  # memory.available, nodefs.available...
    available: Mapped[int] = mapped_column(Integer)
    capacity: Mapped[int] = mapped_column(Integer)
    # The hard and soft thresholds in bytes (or inodes, pids); -1: none set.
    hard_threshold: Mapped[int] = mapped_column(Integer, default=-1)
    soft_threshold: Mapped[int] = mapped_column(Integer, default=-1)
    # The thresholds as the config writes them ("100Mi", "10%"); empty: none.
    hard_written: Mapped[str] = mapped_column(String, default="")
    soft_written: Mapped[str] = mapped_column(String, default="")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class NodePressure(Base):
    """A pressure condition of the node (MemoryPressure, DiskPressure, PIDPressure) as eviction
    decided it, transition period included. status-reporter reports it; pod-sync's admission
    reads it."""

    __tablename__ = "node_pressure"
    condition: Mapped[str] = mapped_column(String, primary_key=True)
    pressure: Mapped[bool] = mapped_column(Boolean, default=False)
    # Which thresholds are met now, in words ("memory.available 80Mi < 100Mi"); empty while the
    # condition only holds for the transition period.
    detail: Mapped[str] = mapped_column(Text, default="")
    transition_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PodEviction(Base):
    """eviction's decision to stop a pod for the node's sake: an eviction (reason Evicted) or a
    node shutdown (reason Terminated). pod-sync stops it within grace_period_seconds and reports
    it Failed with this reason and message. Gone with the pod."""

    __tablename__ = "pod_evictions"
    uid: Mapped[str] = mapped_column(String, primary_key=True)
    namespace: Mapped[str] = mapped_column(String)
    name: Mapped[str] = mapped_column(String)
    signal: Mapped[str] = mapped_column(String)  # the signal, "local-storage" for a limit, "node-shutdown"
    reason: Mapped[str] = mapped_column(String, default="Evicted")
    message: Mapped[str] = mapped_column(Text)
    grace_period_seconds: Mapped[int] = mapped_column(Integer, default=0)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class NodeShutdown(Base):
    """The node's last graceful shutdown as eviction handled it (shutdownGracePeriod): begun
    when systemd-logind announced it, ended once the pods stopped (or cancelled). Kept after the
    reboot for the kubelet's graceful_shutdown_*_time_seconds metrics; boot_id says which boot
    it belongs to, so a shutdown of an earlier boot never holds the node."""

    __tablename__ = "node_shutdown"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    boot_id: Mapped[str] = mapped_column(String)
    in_progress: Mapped[bool] = mapped_column(Boolean, default=False)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ReclaimRequest(Base):
    """eviction asks pod-sync to free disk (dead containers, then unused images) before it evicts
    anything for disk pressure. Every request has the next sequence number."""

    __tablename__ = "reclaim_requests"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    sequence: Mapped[int] = mapped_column(Integer, default=0)
    signal: Mapped[str] = mapped_column(String, default="")
    bytes_to_free: Mapped[int] = mapped_column(Integer, default=0)
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DiskReclaim(Base):
    """pod-sync's last garbage collection of images and dead containers: when, why, what it freed,
    and the reclaim request it answered (0: a periodic image GC)."""

    __tablename__ = "disk_reclaim"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    answered_sequence: Mapped[int] = mapped_column(Integer, default=0)
    trigger: Mapped[str] = mapped_column(String, default="")  # "image GC" or "disk pressure"
    images_removed: Mapped[list[str]] = mapped_column(JSON, default=list)
    containers_removed: Mapped[int] = mapped_column(Integer, default=0)
    bytes_freed: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str] = mapped_column(Text, default="")
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)



class OomKill(Base):
    """The kernel's OOM kills by the cgroup whose memory ran out ("/": the node's), as the
    eviction service read them from /dev/kmsg; node-api serves them as container_oom_events_total."""

    __tablename__ = "oom_kills"
    cgroup: Mapped[str] = mapped_column(String, primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)
    last_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LogVerbosity(Base):
    """The verbosity set at run time through the kubelet API (PUT /debug/flags/v), one row for
    the node: every service logs at it while the configuration's verbosity is still `configured`.
    node-api removes it when it starts, as a kubelet's restart returns to its configuration."""

    __tablename__ = "log_verbosity"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    verbosity: Mapped[int] = mapped_column(Integer)
    configured: Mapped[int] = mapped_column(Integer)  # logging.verbosity of the config it was set over
    set_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ServiceState(Base):
    """Each service's own row: when it started, that it is still alive, and when it last brought
    the tables it owns in line with their sources. Readers (`pykubelet status`) use it to tell
    current rows from what a stopped or not yet reconciled service left behind."""

    __tablename__ = "service_state"
    name: Mapped[str] = mapped_column(String, primary_key=True)
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The first complete reconcile since started_at, and the latest one.
    reconciled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    synced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    stopped_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


# Each row of these tables is written by the service it names (its `name`), by no one else.
OWN_ROW_TABLES = {ServiceState.__tablename__}


# The single writer of each table. Readers are everyone.
TABLE_OWNERS: dict[str, str] = {
    DesiredPod.__tablename__: "pod-sync",
    ManifestError.__tablename__: "pod-sync",
    RefusedPod.__tablename__: "pod-sync",
    PodRuntime.__tablename__: "pod-sync",
    PodStatusRecord.__tablename__: "status-reporter",
    NetworkStatus.__tablename__: "network",
    ProbeResult.__tablename__: "probe",
    NodeHealth.__tablename__: "pod-sync",
    PodVolume.__tablename__: "volume",
    SignalObservation.__tablename__: "eviction",
    NodePressure.__tablename__: "eviction",
    PodEviction.__tablename__: "eviction",
    NodeShutdown.__tablename__: "eviction",
    ReclaimRequest.__tablename__: "eviction",
    OomKill.__tablename__: "eviction",
    DiskReclaim.__tablename__: "pod-sync",
    LogVerbosity.__tablename__: "node-api",
}
