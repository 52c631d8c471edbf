"""The runtime's cgroup driver must be the node's (cgroupDriver): with the systemd driver pod
cgroups are slices and the runtime must make container cgroups as scopes in them; a runtime on
cgroupfs would make directories systemd does not know, and the other way round the runtime finds
no directory where the node made a slice. The kubelet refuses that mismatch; so does pod-sync,
before any sandbox is created, with what to change.
"""

from __future__ import annotations

import logging

from shared.runtime.cri import CRIError
from shared.runtime.cri.interface import RuntimeService

log = logging.getLogger(__name__)


class RuntimeDriverCheck:
    def __init__(self, runtime: RuntimeService, driver: str) -> None:
        self.runtime, self.driver = runtime, driver
        self._problem: str | None = None  # None: not known yet

    async def problem(self) -> str:
        """Why no sandbox may be created ("" when the drivers match or the runtime does not say).
        Asked until the runtime answers once; its answer holds for the runtime's life, and a
        runtime reconfigured means a node restart, as for the kubelet."""
        if self._problem is not None:
            return self._problem
        try:
            theirs = await self.runtime.cgroup_driver()
        except CRIError as exc:
            return f"cannot ask the container runtime for its cgroup driver: {exc}"
        if theirs is None or theirs == self.driver:
            self._problem = ""
            if theirs is None:
                log.info("the container runtime does not say its cgroup driver; using cgroupDriver %s", self.driver)
        else:
            self._problem = (f"the node's cgroupDriver is {self.driver} but the container runtime uses {theirs}: make "
                             f"them match (containerd: SystemdCgroup = {str(self.driver == 'systemd').lower()} in its "
                             "runc options, or cgroupDriver in the node's config), then restart both")
            log.error("%s", self._problem)
        return self._problem
