"""Watching the container runtime's own health (CRI Status) for readiness checks."""

from __future__ import annotations

import asyncio

from shared.cri import CRIError, RuntimeService

CHECK_EVERY = 5.0


class RuntimeHealth:
    def __init__(self, runtime: RuntimeService) -> None:
        self.runtime = runtime
        self.conditions: dict[str, tuple[bool, str]] = {}
        self.error = "not checked yet"

    async def poll(self) -> None:
        try:
            resp = await self.runtime.status()
        except CRIError as exc:
            self.error = str(exc)
            self.conditions = {}
            return
        self.error = ""
        self.conditions = {c.type: (c.status, f"{c.reason}: {c.message}".strip(": "))
                           for c in resp.status.conditions}

    async def run(self) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(CHECK_EVERY)

    def condition(self, name: str) -> tuple[bool, str]:
        if self.error:
            return False, f"container runtime unreachable: {self.error}"
        ok, msg = self.conditions.get(name, (False, f"runtime reports no {name} condition"))
        return ok, "ok" if ok else msg

    def runtime_ready(self) -> tuple[bool, str]:
        return self.condition("RuntimeReady")
