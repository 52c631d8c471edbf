"""What each running pod uses, for ranking and for local-storage limits.

Memory and processes come from the pod's cgroups; local storage is the containers' writable
layers (CRI container stats), their log files, and the emptyDirs the volume service measures.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from shared.host.cgroups import CgroupReader
from shared.host.disk_usage import tree_usage
from shared.model.cgroup_names import container_cgroup
from shared.model.podspec import Pod
from shared.runtime.cri import CRIError, RuntimeService

log = logging.getLogger(__name__)

# A container's log dir holds its rotated files: a few entries, bounded all the same.
LOG_WALK_LIMIT = 1_000


@dataclass
class ActivePod:
    """A pod eviction may act on: admitted, not stopping, something of it running."""

    uid: str
    pod: Pod
    source: str  # "file" or "http" (static) or "api"
    container_ids: dict[str, str]  # container name -> runtime ID of its current instance
    log_dir: str = ""
    # emptyDir name -> (bytes used, sizeLimit in bytes or 0), as the volume service measured
    empty_dirs: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass
class PodUsage:
    memory: int | None = None  # working set of the pod's cgroup
    containers_memory: dict[str, int] = field(default_factory=dict)
    processes: int = 0
    rootfs: dict[str, int] = field(default_factory=dict)  # container -> writable layer bytes
    logs: dict[str, int] = field(default_factory=dict)  # container -> log bytes
    volumes: int = 0  # emptyDirs on disk (memory-backed ones are memory)

    def container_storage(self, name: str) -> int | None:
        if name not in self.rootfs and name not in self.logs:
            return None
        return self.rootfs.get(name, 0) + self.logs.get(name, 0)

    @property
    def local_storage(self) -> int:
        return sum(self.rootfs.values()) + sum(self.logs.values()) + self.volumes


class UsageCollector:
    def __init__(self, runtime: RuntimeService, cgroups: CgroupReader | None = None) -> None:
        self.runtime = runtime
        self.cgroups = cgroups or CgroupReader()

    def memory_and_processes(self, pods: list[ActivePod]) -> dict[str, PodUsage]:
        out: dict[str, PodUsage] = {}
        for p in pods:
            usage = PodUsage()
            cgroup = self.cgroups.pod_cgroup(p.uid)
            if cgroup is not None:
                usage.memory = self.cgroups.sample(cgroup).working_set
                usage.processes = self.cgroups.process_count(cgroup) or 0
                for name, cid in p.container_ids.items():
                    child = container_cgroup(cgroup, cid)
                    if self.cgroups.exists(child):
                        ws = self.cgroups.sample(child).working_set
                        if ws is not None:
                            usage.containers_memory[name] = ws
            out[p.uid] = usage
        return out

    async def with_storage(self, pods: list[ActivePod]) -> dict[str, PodUsage]:
        out = self.memory_and_processes(pods)
        try:
            stats = {s.attributes.id: s for s in await self.runtime.list_container_stats()}
        except CRIError as exc:
            log.warning("container stats unavailable, local storage counts logs and volumes only: %s", exc)
            stats = {}
        for p in pods:
            usage = out[p.uid]
            for name, cid in p.container_ids.items():
                s = stats.get(cid)
                if s is not None and s.HasField("writable_layer"):
                    usage.rootfs[name] = s.writable_layer.used_bytes.value
                if p.log_dir:
                    logs = tree_usage(Path(p.log_dir) / name, LOG_WALK_LIMIT)
                    usage.logs[name] = logs.bytes if logs is not None else 0
            memory_backed = {v.name for v in p.pod.spec.volumes
                             if v.kind == "emptyDir" and (v.source or {}).get("medium") == "Memory"}
            usage.volumes = sum(used for name, (used, _) in p.empty_dirs.items() if name not in memory_backed)
        return out
