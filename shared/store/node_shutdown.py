"""A graceful node shutdown as every service sees it (shutdownGracePeriod): eviction decides it
(services/eviction/node_shutdown.py), pod-sync refuses new pods and stops the node's pods,
status-reporter reports the Node not ready and the pods Failed. The words are the kubelet's, so
what a user reads on a pykubelet node is what the kubelet would have written."""

from __future__ import annotations

from functools import cache

from sqlalchemy.orm import Session

from shared.host.facts import boot_id
from shared.store import NodeShutdown

# A pod stopped for the shutdown: Failed with this reason and message, and a DisruptionTarget
# condition saying the kubelet terminated it.
TERMINATED = "Terminated"
TERMINATED_MESSAGE = "Pod was terminated in response to imminent node shutdown."
SIGNAL = "node-shutdown"
# A pod that comes while the node shuts down is not admitted.
NOT_ADMITTED = "NodeShutdown"
NOT_ADMITTED_MESSAGE = "Pod was rejected as the node is shutting down."
# The Node's Ready condition while it shuts down.
NOT_READY = "node is shutting down"


def shutting_down(session: Session, this_boot: str | None = None) -> bool:
    """Is the node shutting down now? A shutdown recorded in an earlier boot is over: the store
    outlives the reboot, the shutdown does not."""
    row = session.get(NodeShutdown, 1)
    return row is not None and row.in_progress and row.boot_id == (this_boot or _this_boot())


@cache
def _this_boot() -> str:
    """Read once: a process does not outlive its boot."""
    return boot_id()
