"""The node's local state store (SQLite, WAL mode), one writing service per table."""

from shared.store.db import Store, OwnershipError
from shared.store.models import (
    DesiredPod,
    DiskReclaim,
    NodePressure,
    PodEviction,
    ReclaimRequest,
    SignalObservation,
    ManifestError,
    NetworkStatus,
    NodeHealth,
    PodRuntime,
    PodStatusRecord,
    PodVolume,
    ProbeResult,
    RefusedPod,
    ServiceState,
    TABLE_OWNERS,
)

__all__ = [
    "Store",
    "OwnershipError",
    "DesiredPod",
    "DiskReclaim",
    "NodePressure",
    "PodEviction",
    "ReclaimRequest",
    "SignalObservation",
    "ManifestError",
    "NetworkStatus",
    "NodeHealth",
    "PodRuntime",
    "PodStatusRecord",
    "PodVolume",
    "ProbeResult",
    "RefusedPod",
    "ServiceState",
    "TABLE_OWNERS",
]
