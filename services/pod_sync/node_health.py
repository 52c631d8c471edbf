"""Publishing what node readiness is made of (runtime status, PLEG health) to the store, where
status-reporter reads it for the Node's Ready condition."""

from __future__ import annotations

import logging
from typing import Callable

from shared import periodic
from shared.cri import CRIError, RuntimeService
from shared.store import NodeHealth, Store
from shared.store.models import utcnow

log = logging.getLogger(__name__)

PERIOD = 5.0


class NodeHealthWriter:
    def __init__(self, runtime: RuntimeService, store: Store, pleg_healthy: Callable[[], tuple[bool, str]]) -> None:
        self.runtime = runtime
        self.store = store
        self.pleg_healthy = pleg_healthy
        self.runtime_state: tuple[bool, str] = (False, "not checked yet")

    async def write_once(self) -> None:
        try:
            version = await self.runtime.version()
            status = await self.runtime.status()
            conds = {c.type: c for c in status.status.conditions}
            rt = conds.get("RuntimeReady")
            ready = bool(rt and rt.status)
            message = "" if ready else f"container runtime status check may not have completed yet: " \
                                       f"{rt.reason + ': ' + rt.message if rt else 'no RuntimeReady condition'}"
            runtime_version = f"{version.runtime_name}://{version.runtime_version}"
        except CRIError as exc:
            ready, message, runtime_version = False, f"container runtime is down: {exc}", ""
        self.runtime_state = (ready, "ok" if ready else message)
        pleg_ok, pleg_message = self.pleg_healthy()
        with self.store.session() as s:
            s.merge(NodeHealth(id=1, runtime_ready=ready, runtime_message=message, runtime_version=runtime_version,
                               pleg_healthy=pleg_ok, pleg_message="" if pleg_ok else pleg_message,
                               updated_at=utcnow()))

    def runtime_ready(self) -> tuple[bool, str]:
        """The admin app's readiness check: the same observation the node reports."""
        return self.runtime_state

    async def run(self) -> None:
        # A store that cannot be written (a full disk) is logged and retried; the runtime's own
        # trouble is what write_once records.
        await periodic.every(PERIOD, "recording the node's runtime health", self.write_once, log)
