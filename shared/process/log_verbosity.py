"""The node's log verbosity, which the kubelet API can change at run time (PUT /debug/flags/v,
enableDebugFlagsHandler): node-api records it in the store (log_verbosity) and wakes every
service, which logs at it from then on; a service that starts later reads it there. The
kubelet's process forgets such a change when it restarts: node-api clears the row when it starts,
and every service returns to the configuration's `logging.verbosity`. A row set over another
configured verbosity (the configuration was edited since) is not followed either."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import delete

from shared.bus.messages import LogVerbosityChanged
from shared.process.log_format import set_verbosity
from shared.store import LogVerbosity, Store

if TYPE_CHECKING:
    from shared.bus.client import Bus

log = logging.getLogger(__name__)

ROW = {"id": 1}


def effective_verbosity(store: Store, configured: int) -> int:
    """The verbosity this node's services log at: the run-time one, or the configuration's."""
    row = store.read_row(LogVerbosity, ROW)
    if row is None or row["configured"] != configured:
        return configured
    return int(row["verbosity"])


def record(store: Store, verbosity: int, configured: int) -> None:
    """node-api: the verbosity set through the kubelet API."""
    store.upsert(LogVerbosity, ROW, {"verbosity": verbosity, "configured": configured})


def clear(store: Store) -> None:
    """node-api, at its start: back to the configuration's verbosity."""
    with store.session() as session:
        session.execute(delete(LogVerbosity))


async def follow(store: Store, bus: Bus, configured: int) -> None:
    """Log at the node's verbosity now and whenever node-api says it changed."""
    current = configured

    async def apply(_event: LogVerbosityChanged | None = None) -> None:
        nonlocal current
        verbosity = await store.run(effective_verbosity, store, configured)
        set_verbosity(verbosity)
        if verbosity != current:
            # Logged at the most detailed level now written: the line shows that the level took.
            log.log(logging.DEBUG if verbosity >= 4 else logging.INFO, "log verbosity %d (was %d)%s", verbosity,
                    current, ", the configuration's" if verbosity == configured else "")
            current = verbosity

    await bus.subscribe(LogVerbosityChanged, apply)
    await apply()
