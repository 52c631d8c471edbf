"""The gRPC core settings every pykubelet process runs with.

gRPC core reads its environment once, when `grpc` is first imported, so `pykubelet` applies these
before any command imports it. An operator's own values are left as they are.

Both settings are about what an idle node pays for its CRI and CSI channels (measured on a
cluster-mode node at 0 pods, all services, CPU over 2 x 120 s: 0.0093 cores before, 0.0087 after;
pod-sync's two CRI calls a second alone, 2 calls/s over 60 s: 0.0033 -> 0.0020 cores).
"""

from __future__ import annotations

import os

SETTINGS = {
    # The EventEngine client (this grpcio's default) hands each call to worker threads that wake
    # several times per call; the classic client completes it on the caller's poller.
    "GRPC_EXPERIMENTS": "-event_engine_client",
    # The classic client's backup poll wakes a timer thread for every channel every 5 s, to notice
    # a dropped connection while no call is running. Every channel here is a local socket, and a
    # call reconnects by itself: with the poll off, the first call after the server restarted
    # still succeeds (checked against a restarted server; tests/resilience kill containerd).
    "GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS": "0",
}


def apply() -> None:
    for name, value in SETTINGS.items():
        os.environ.setdefault(name, value)
