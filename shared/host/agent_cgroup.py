"""The cgroup the Summary API reports as the "kubelet" system container.

The kubelet reports its own process's cgroup there (found from /proc/self/cgroup every few
minutes; on cgroup v1 only where its cpu and memory hierarchies agree, else none). pykubelet is
several processes: under `pykubelet up` they all share the cgroup `up` was started in; under
systemd each service is a unit of pykubelet.slice, and that slice (every service and the bus) is
what the node agent uses, so it is the one reported. A process outside that slice reports its
own cgroup, as the kubelet does."""

from __future__ import annotations

from pathlib import Path

AGENT_SLICE = "pykubelet.slice"


def process_cgroup(text: str, version: int) -> str | None:
    """A process's cgroup from its /proc/PID/cgroup: v2's unified one; on v1 the cpu and memory
    hierarchies' path when they are the same (None otherwise: no one cgroup holds its usage)."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if not path.startswith("/") or ".." in path.split("/"):
            continue
        if version == 2 and line.startswith("0::"):
            return path
        for controller in controllers.split(","):
            paths[controller] = path
    if version == 2:
        return None
    cpu, memory = paths.get("cpu"), paths.get("memory")
    return cpu if cpu is not None and cpu == memory else None


def agent_cgroup(text: str, version: int) -> str | None:
    own = process_cgroup(text, version)
    if own is None:
        return None
    parts = [p for p in own.split("/") if p]
    if AGENT_SLICE in parts:
        return "/" + "/".join(parts[:parts.index(AGENT_SLICE) + 1])
    return own


def own_agent_cgroup(version: int, proc: Path = Path("/proc")) -> str | None:
    try:
        return agent_cgroup((proc / "self" / "cgroup").read_text(), version)
    except OSError:
        return None
