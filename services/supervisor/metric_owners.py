"""Which service's code registered each Prometheus metric, so that a forked service exports only
its own.

A service started by itself imports only its own modules: its /metrics has its metrics and the
shared ones (bus, store, CRI). A service forked by `pykubelet up` inherits every metric the
preload registered, all seven services' worth: a gauge such as kubelet_running_pods would be
exported by each of them, and the kubelet API's merged /metrics would show it once per service
(six of them a constant 0). The preload records which service package defined each metric; the
forked service unregisters the others'.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from types import FrameType
from typing import Iterator

from prometheus_client import REGISTRY
from prometheus_client.registry import Collector

# collector -> the package under services/ whose module created it ("pod_sync")
_owners: dict[Collector, str] = {}


@contextmanager
def recording() -> Iterator[None]:
    """While imports run: note the service package of the module each new metric is made in."""
    register = REGISTRY.register

    def register_and_note(collector: Collector) -> None:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_name != "<module>":  # the defining module's body
            frame = frame.f_back
        parts = str(frame.f_globals.get("__name__", "")).split(".") if frame is not None else []
        if len(parts) > 1 and parts[0] == "services":
            _owners[collector] = parts[1]
        register(collector)

    REGISTRY.register = register_and_note  # type: ignore[method-assign]
    try:
        yield
    finally:
        REGISTRY.register = register  # type: ignore[method-assign]


def keep_only(service: str) -> None:
    """In a forked service: unregister the metrics the other services' code registered."""
    own = service.replace("-", "_")
    for collector, owner in _owners.items():
        if owner != own:
            REGISTRY.unregister(collector)
