"""The OOM kills /metrics/cadvisor counts (container_oom_events_total), as the kubelet 1.37
counts them itself: every kill the kernel logs from node-api's start, by the cgroup whose memory
ran out (shared/host/oom_kills.py)."""

from __future__ import annotations

import logging

from shared.host import oom_kills

log = logging.getLogger(__name__)

# Cgroups that ever ran out, kept; past this many the oldest go (a container's cgroup name is
# never reused, so an old entry is a gone container's).
MAX_CGROUPS = 4096


class OomCounts:
    def __init__(self, kmsg: str = oom_kills.KMSG) -> None:
        self.kmsg = kmsg
        self._counts: dict[str, int] = {}
        self._reading = False

    def seen(self, kill: oom_kills.OomKill) -> None:
        self._counts[kill.memcg] = self._counts.pop(kill.memcg, 0) + 1  # newest last
        while len(self._counts) > MAX_CGROUPS:
            del self._counts[next(iter(self._counts))]
        log.info("OOM kill in %s: %s (pid %d) in %s", kill.memcg, kill.task, kill.pid, kill.victim_memcg)

    def counts(self) -> dict[str, int] | None:
        """The counts by cgroup name; None while the kernel's log is not being read."""
        return dict(self._counts) if self._reading else None

    async def run(self) -> None:
        try:
            self._reading = True
            await oom_kills.watch(self.seen, self.kmsg)
        except OSError as exc:
            log.warning("cannot read OOM kills from %s (%s): /metrics/cadvisor leaves out "
                        "container_oom_events_total", self.kmsg, exc)
        finally:
            self._reading = False
