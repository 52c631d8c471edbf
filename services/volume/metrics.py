"""The kubelet's volume metrics, same names and labels."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Iterator

from prometheus_client import REGISTRY, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

STORAGE_OPERATION_DURATION = Histogram(
    "storage_operation_duration_seconds", "Storage operation duration",
    ["volume_plugin", "operation_name", "status"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600))

_STATS = ("capacity_bytes", "available_bytes", "used_bytes", "inodes", "inodes_free", "inodes_used")
VOLUME_STATS = {name: Gauge(f"kubelet_volume_stats_{name}", f"Volume {name.replace('_', ' ')} (PVC volumes)",
                            ["namespace", "persistentvolumeclaim"]) for name in _STATS}


@contextmanager
def timed(plugin: str, operation: str) -> Iterator[None]:
    """operation: volume_mount, volume_unmount, mount_device (CSI stage), unmount_device."""
    start = time.monotonic()
    status = "fail-unknown"
    try:
        yield
        status = "success"
    finally:
        STORAGE_OPERATION_DURATION.labels(plugin, operation, status).observe(time.monotonic() - start)


def set_volume_stats(namespace: str, claim: str, stats: dict[str, int]) -> None:
    VOLUME_STATS["capacity_bytes"].labels(namespace, claim).set(stats.get("bytes_total", 0))
    VOLUME_STATS["available_bytes"].labels(namespace, claim).set(stats.get("bytes_available", 0))
    VOLUME_STATS["used_bytes"].labels(namespace, claim).set(stats.get("bytes_used", 0))
    VOLUME_STATS["inodes"].labels(namespace, claim).set(stats.get("inodes_total", 0))
    VOLUME_STATS["inodes_free"].labels(namespace, claim).set(stats.get("inodes_available", 0))
    VOLUME_STATS["inodes_used"].labels(namespace, claim).set(stats.get("inodes_used", 0))


def forget_volume_stats(namespace: str, claim: str) -> None:
    for gauge in VOLUME_STATS.values():
        try:
            gauge.remove(namespace, claim)
        except KeyError:
            pass


class PodCertificateStates(Collector):
    """kubelet_podcertificate_states: the podCertificate sources this node keeps, by signer and
    state (not_yet_issued, fresh, overdue_for_refresh, expired, denied, failed), read when scraped."""

    def __init__(self) -> None:
        self.source: Callable[[], Counter[tuple[str, str]]] | None = None

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("kubelet_podcertificate_states",
                                   "Gauge vector reporting the number of pod certificate projected volume sources, "
                                   "faceted by signer_name and state.", labels=["signer_name", "state"])
        for (signer, state), count in sorted((self.source() if self.source else Counter()).items()):
            family.add_metric([signer, state], count)
        yield family


POD_CERTIFICATE_STATES = PodCertificateStates()
REGISTRY.register(POD_CERTIFICATE_STATES)
