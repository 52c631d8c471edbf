"""A probe's result as the probe service writes it to probe_results and pod-sync (liveness
restarts) and status-reporter (readiness, startup) read it: the kubelet's proberesults.Result."""

from __future__ import annotations

from enum import StrEnum


class ProbeState(StrEnum):
    SUCCESS = "Success"
    FAILURE = "Failure"
    UNKNOWN = "Unknown"  # not probed yet (a startup probe before its first result)
