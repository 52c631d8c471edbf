"""The pod's own cgroup (/kubepods[/<tier>]/pod<uid>): its CPU shares, CPU quota and memory
limit, set before the sandbox starts in it, as the kubelet's pod container manager does
(ResourceConfigForPod).

With the cgroupfs driver pod-sync makes the directories and writes the files; with the systemd
driver (`slices` given) each cgroup is a slice unit systemd makes and writes from the properties
pod-sync gives it (services/pod_sync/systemd_slices.py). Both are read from the files.

The pod cgroup caps what its containers take together: cpu.shares from the pod's requests, a
CPU quota and a memory limit when every container has one (their sum) or the pod has pod-level
limits. Containers in it get their own cgroups from the runtime below it.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

from services.pod_sync.resources import CGROUP_ROOT, CPU_PERIOD, MIN_SHARES, cpu_quota, cpu_shares, cpu_weight
from services.pod_sync.systemd_slices import SlicesError, SystemdSlices, properties
from shared.host.cgroup_dirs import make_dir, make_dirs
from shared.host.node_resources import ReservedCgroup
from shared.model.cgroup_names import CGROUPFS, KUBEPODS, SYSTEMD, on_host, slice_unit
from shared.model.podspec import Container, Pod
from shared.model.qos import pod_level, pod_requests, qos_class
from shared.model.quantity import millicores, to_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodCgroupConfig:
    cpu_shares: int
    cpu_quota: int | None  # None: no CPU limit
    memory_limit: int | None  # None: no memory limit
    pids_limit: int | None = None  # podPidsLimit; None: no limit
    # memory.high from memoryThrottlingFactor, memory.min / memory.low from memoryReservationPolicy
    # (services/pod_sync/memory_qos.py; cgroup v2); None: left as it is.
    memory_high: int | None = None
    memory_min: int | None = None
    memory_low: int | None = None
    cpu_period: int = CPU_PERIOD  # cpuCFSQuotaPeriod, microseconds


def pod_limits(pod: Pod, name: str) -> int | None:
    """The pod's limit of one resource: its pod-level limit, else the sum of its containers'
    (the larger of that and its biggest init container) when every container has one."""
    own = pod_level(pod)
    if own is not None and name in own.limits:
        return millicores(own.limits[name]) if name == "cpu" else to_bytes(own.limits[name])

    def limit(c: Container) -> int | None:
        q = c.resources.limits.get(name)
        return None if q is None else millicores(q) if name == "cpu" else to_bytes(q)

    everyone = pod.spec.initContainers + pod.spec.containers
    values = [limit(c) for c in everyone]
    if not everyone or any(v is None for v in values):
        return None
    sidecars = {c.name for c in pod.spec.sidecars}
    side = sum(limit(c) or 0 for c in pod.spec.initContainers if c.name in sidecars)
    apps = sum(limit(c) or 0 for c in pod.spec.containers) + side
    inits = max(((limit(c) or 0) + side for c in pod.spec.initContainers if c.name not in sidecars), default=0)
    return max(apps, inits)


def pod_cgroup_config(pod: Pod, pod_pids_limit: int = -1, cfs_quota: bool = True,
                      cpu_period: int = CPU_PERIOD) -> PodCgroupConfig:
    """cfs_quota: cpuCFSQuota; false leaves the pod's CPU limit without a CFS quota. cpu_period:
    cpuCFSQuotaPeriod in microseconds."""
    pids = pod_pids_limit if pod_pids_limit > 0 else None
    if qos_class(pod) == "BestEffort":
        return PodCgroupConfig(MIN_SHARES, None, None, pids, cpu_period=cpu_period)
    cpu_limit, memory_limit = pod_limits(pod, "cpu"), pod_limits(pod, "memory")
    return PodCgroupConfig(cpu_shares=cpu_shares(pod_requests(pod)["cpu"]),
                           cpu_quota=cpu_quota(cpu_limit, cpu_period) if cpu_limit is not None and cfs_quota else None,
                           memory_limit=memory_limit, pids_limit=pids, cpu_period=cpu_period)


def _rel(parent: str, slices: SystemdSlices | None) -> str:
    return on_host(parent, SYSTEMD if slices is not None else CGROUPFS).strip("/")


def _apply(slices: SystemdSlices, name: str, config: PodCgroupConfig, what: str, pids: bool = True,
           memory: bool = True) -> list[str]:
    try:
        slices.apply(name, properties(config, config.cpu_period, cpu_weight(config.cpu_shares), pids=pids, memory=memory,
                                      legacy=slices.legacy),
                     f"pykubelet {what}")
    except SlicesError as exc:
        return [str(exc)]
    return []


def _files(parent: str, config: PodCgroupConfig, root: Path, pids: bool = True,
           slices: SystemdSlices | None = None) -> list[tuple[Path, str]]:
    """The files of the settings; pids=False leaves pids.max out (a resize does not touch it)."""
    rel = _rel(parent, slices)
    pids_max = str(config.pids_limit) if config.pids_limit is not None else "max"
    if (root / "cgroup.controllers").is_file():
        d = root / rel
        return [(d / "cpu.weight", str(cpu_weight(config.cpu_shares))),
                (d / "cpu.max", f"{config.cpu_quota if config.cpu_quota is not None else 'max'} {config.cpu_period}"),
                (d / "memory.max", str(config.memory_limit) if config.memory_limit is not None else "max"),
                *[(d / name, str(value)) for name, value in (("memory.high", config.memory_high),
                                                              ("memory.min", config.memory_min),
                                                              ("memory.low", config.memory_low)) if value is not None],
                *([(d / "pids.max", pids_max)] if pids else [])]
    cpu, memory = root / "cpu" / rel, root / "memory" / rel
    return [(cpu / "cpu.shares", str(config.cpu_shares)), (cpu / "cpu.cfs_period_us", str(config.cpu_period)),
            (cpu / "cpu.cfs_quota_us", str(config.cpu_quota if config.cpu_quota is not None else -1)),
            (memory / "memory.limit_in_bytes", str(config.memory_limit if config.memory_limit is not None else -1)),
            # Without a pids hierarchy only a limit asked for is written (and fails, saying so).
            *([(root / "pids" / rel / "pids.max", pids_max)]
              if pids and (config.pids_limit is not None or (root / "pids").is_dir()) else [])]


def _write(files: list[tuple[Path, str]]) -> list[str]:
    problems = []
    for path, value in files:
        try:
            path.write_text(value)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
    return problems


def ensure(parent: str, config: PodCgroupConfig, root: Path = CGROUP_ROOT,
           slices: SystemdSlices | None = None) -> list[str]:
    """Make the pod's cgroup (and its tier) and write its settings; what failed, in words."""
    if slices is not None:
        return _apply(slices, parent, config, f"pod cgroup {parent}")
    rel = parent.strip("/")
    try:
        if (root / "cgroup.controllers").is_file():
            # cgroup v2: a cgroup has cpu and memory files only where its parent delegates them.
            make_dirs(root, rel, before_each=lambda d: (d / "cgroup.subtree_control").write_text("+cpu +memory +pids"))
        else:
            for controller in ("cpu", "memory", "pids"):
                if controller != "pids" or (root / controller).is_dir():
                    make_dirs(root / controller, rel)
    except OSError as exc:
        return [f"creating the pod cgroup {parent}: {exc.strerror or exc}"]
    return _write(_files(parent, config, root))


def exists(parent: str, root: Path = CGROUP_ROOT, slices: SystemdSlices | None = None) -> bool:
    rel = _rel(parent, slices)
    return (root / rel).is_dir() if (root / "cgroup.controllers").is_file() else (root / "cpu" / rel).is_dir()


def current(parent: str, root: Path = CGROUP_ROOT, slices: SystemdSlices | None = None) -> PodCgroupConfig | None:
    """What the pod's cgroup has now; None when it cannot be read."""
    def number(text: str) -> int | None:
        return None if text in ("max", "-1") or int(text) >= 2**62 else int(text)  # v1 "unlimited" is huge

    try:
        texts = {path.name: path.read_text().split()
                 for path, _ in _files(parent, PodCgroupConfig(0, None, None), root, pids=False, slices=slices)}
        values = {name: words[0] for name, words in texts.items()}
        if "cpu.max" in values:
            weight = int(values["cpu.weight"])
            return PodCgroupConfig(cpu_shares=2 + (weight - 1) * 262_142 // 9999, cpu_quota=number(values["cpu.max"]),
                                   memory_limit=number(values["memory.max"]), cpu_period=int(texts["cpu.max"][1]))
        return PodCgroupConfig(cpu_shares=int(values["cpu.shares"]), cpu_quota=number(values["cpu.cfs_quota_us"]),
                               memory_limit=number(values["memory.limit_in_bytes"]),
                               cpu_period=int(values["cpu.cfs_period_us"]))
    except (OSError, ValueError, IndexError):
        return None


def _larger(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else max(a, b)  # None: no limit, the largest


def resize(parent: str, new: PodCgroupConfig, containers_done: bool, root: Path = CGROUP_ROOT,
           slices: SystemdSlices | None = None) -> list[str]:
    """Resize the pod's cgroup around its containers' resize: before them, to what holds both
    the old and the new settings; after them, to the new. (cgroup v1 refuses a container's CPU
    quota above its pod's, and a pod's below a container's.)"""
    now = current(parent, root, slices)
    if now is None:
        return [f"cannot read the pod cgroup {parent}"]
    # pids.max is not resized
    new = PodCgroupConfig(new.cpu_shares, new.cpu_quota, new.memory_limit, cpu_period=new.cpu_period)
    if now.cpu_quota is None and new.cpu_quota is None:
        now = replace(now, cpu_period=new.cpu_period)  # a slice without a quota keeps systemd's period
    if now == new:
        return []
    target = new if containers_done else PodCgroupConfig(max(now.cpu_shares, new.cpu_shares),
                                                         _larger(now.cpu_quota, new.cpu_quota),
                                                         _larger(now.memory_limit, new.memory_limit),
                                                         cpu_period=new.cpu_period)
    if slices is not None:
        return _apply(slices, parent, target, f"pod cgroup {parent}", pids=False)
    return _write(_files(parent, target, root, pids=False))


def qos_tier_shares(pods: list[Pod], kubepods: str = KUBEPODS) -> dict[str, int]:
    """cpu.shares of the QoS tiers (the kubelet's QoS container manager): BestEffort pods
    share the minimum; Burstable pods their requests together; Guaranteed pods sit in
    /kubepods itself."""
    burstable = sum(pod_requests(p)["cpu"] for p in pods if qos_class(p) == "Burstable")
    return {f"{kubepods}/besteffort": MIN_SHARES, f"{kubepods}/burstable": cpu_shares(burstable)}


def tier_protection(guaranteed: int, burstable: int, kubepods: str = KUBEPODS) -> dict[str, dict[str, int]]:
    """memory.min / memory.low of kubepods and the Burstable tier from the memory requests the
    pods below protect (memory_qos.tier_memory_protection): a cgroup's protection reaches only
    as far as its ancestors', so kubepods covers both classes."""
    return {kubepods: {"memory.min": guaranteed + burstable, "memory.low": burstable},
            f"{kubepods}/burstable": {"memory.low": burstable}}


_PROTECTION_PROPERTIES = {"memory.min": "MemoryMin", "memory.low": "MemoryLow"}


def set_qos_tiers(pods: list[Pod], root: Path = CGROUP_ROOT, slices: SystemdSlices | None = None,
                  kubepods: str = KUBEPODS, protection: tuple[int, int] | None = None) -> list[str]:
    """Write the tiers' shares (making the tiers where missing) and, given (Guaranteed,
    Burstable) protected bytes, the tiers' memory protection (cgroup v2); what failed, in words."""
    tiers = qos_tier_shares(pods, kubepods)
    protect = tier_protection(*protection, kubepods) if protection is not None else {}
    if slices is not None:
        problems = [problem for tier, value in tiers.items()
                    for problem in _apply(slices, tier, PodCgroupConfig(value, None, None), f"QoS tier {tier}",
                                          pids=False, memory=False)]
        for name, values in protect.items():
            try:
                slices.change(slice_unit(name), [(_PROTECTION_PROPERTIES[k], ("t", v)) for k, v in values.items()])
            except SlicesError as exc:
                problems.append(str(exc))
        return problems
    v2 = (root / "cgroup.controllers").is_file()
    files = []
    for tier, value in tiers.items():
        try:
            d = make_dirs(root if v2 else root / "cpu", tier)
        except OSError as exc:
            return [f"creating the QoS cgroup {tier}: {exc.strerror or exc}"]
        files.append((d / "cpu.weight", str(cpu_weight(value))) if v2 else (d / "cpu.shares", str(value)))
    if v2:
        files += [(root / name.strip("/") / k, str(v)) for name, values in protect.items() for k, v in values.items()]
    return _write(files)


# A pod cgroup younger than this is never an orphan: pod-sync makes it just before the sandbox.
ORPHAN_MIN_AGE = 30.0
_UID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _tier_dir(tier: str, root: Path, slices: SystemdSlices | None) -> Path:
    rel = _rel(tier, slices)
    return root / rel if (root / "cgroup.controllers").is_file() else root / "cpu" / rel


def pod_cgroups(root: Path = CGROUP_ROOT, slices: SystemdSlices | None = None,
                kubepods: str = KUBEPODS) -> dict[str, str]:
    """Every pod cgroup under the QoS tiers, by pod UID: {uid: "/kubepods/<tier>/pod<uid>"}."""
    found: dict[str, str] = {}
    for tier in (kubepods, f"{kubepods}/burstable", f"{kubepods}/besteffort"):
        d = _tier_dir(tier, root, slices)
        prefix = "pod" if slices is None else slice_unit(tier).removesuffix(".slice") + "-pod"
        suffix = "" if slices is None else ".slice"
        try:
            children = [c for c in d.iterdir() if c.is_dir()]
        except OSError:
            continue
        for child in children:
            name = child.name
            if not (name.startswith(prefix) and name.endswith(suffix)):
                continue
            uid = name[len(prefix):len(name) - len(suffix)]
            if slices is not None:
                uid = uid.replace("_", "-")  # the slice name's escape of "-"
            if _UID.fullmatch(uid):
                found[uid] = f"{tier}/pod{uid}"
    return found


def _has_processes(d: Path) -> bool:
    for procs in d.rglob("cgroup.procs"):
        try:
            if procs.read_text().strip():
                return True
        except OSError:
            return True  # unreadable: not ours to judge
    return False


def remove_orphans(orphans: dict[str, str], root: Path = CGROUP_ROOT, slices: SystemdSlices | None = None,
                   min_age: float = ORPHAN_MIN_AGE) -> list[str]:
    """Remove the cgroups of pods pod-sync no longer knows (a crashed run's, a pod removed while
    pod-sync was down), as the kubelet's cleanupOrphanedPodCgroups does; only empty ones older
    than min_age. Returns the names removed."""
    removed = []
    v2 = (root / "cgroup.controllers").is_file()
    for name in orphans.values():
        rel = _rel(name, slices)
        dirs = [root / rel] if v2 else [h / rel for h in root.iterdir() if (h / rel).is_dir()]
        try:
            if not dirs or time.time() - dirs[0].stat().st_ctime < min_age:
                continue
        except OSError:
            continue
        if any(_has_processes(d) for d in dirs):
            log.warning("pod cgroup %s belongs to no pod but has processes: left alone", name)
            continue
        if slices is not None:
            slices.remove(name)
        else:
            for d in dirs:
                # Leftover container cgroups first (the runtime's, empty), then the pod's.
                for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    _rmdir(sub)
                _rmdir(d)
        removed.append(name)
    return removed


def _rmdir(d: Path) -> None:
    try:
        os.rmdir(d)
    except OSError as exc:
        log.debug("cgroup %s not removed: %s", d, exc)


def enforce_pods_allocatable(memory_bytes: int, cpu_millicores: int, root: Path = CGROUP_ROOT,
                             slices: SystemdSlices | None = None, kubepods: str = KUBEPODS,
                             pids: int | None = None) -> list[str]:
    """Node allocatable on /kubepods (pods_cgroup_limits): with enforceNodeAllocatable=pods, capacity
    minus kubeReserved and systemReserved, so pods together cannot take what the system and
    pykubelet were promised. pids: its pids.max, None to leave it. Returns what could not be set,
    in words (the caller logs it; pods still run)."""
    if slices is not None:
        return _apply(slices, kubepods, PodCgroupConfig(cpu_shares(cpu_millicores), None, memory_bytes, pids),
                      "pods (node allocatable)", pids=pids is not None)
    problems = []
    v2 = (root / "cgroup.controllers").is_file()
    shares = cpu_shares(cpu_millicores)
    rel = kubepods.strip("/")
    writes = ([(root / rel / "memory.max", str(memory_bytes)),
               (root / rel / "cpu.weight", str(cpu_weight(shares)))] if v2 else
              [(root / "memory" / rel / "memory.limit_in_bytes", str(memory_bytes)),
               (root / "cpu" / rel / "cpu.shares", str(shares))])
    if pids is not None and (v2 or (root / "pids").is_dir()):
        writes.append((root / rel / "pids.max" if v2 else root / "pids" / rel / "pids.max", str(pids)))
    if v2:
        # Delegate the controllers down to it (cgroupRoot's cgroup may have none enabled).
        ancestors = [root]
        for part in rel.split("/")[:-1]:
            ancestors.append(ancestors[-1] / part)
        writes = [(d / "cgroup.subtree_control", "+cpu +memory +pids") for d in ancestors] + writes
    for path, value in writes:
        try:
            if path.name != "cgroup.subtree_control":
                make_dir(path.parent)  # kubepods; its parent, the cgroup root, exists (a start check)
            path.write_text(value)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
    return problems


def enforce_reserved(reserved: ReservedCgroup, root: Path = CGROUP_ROOT,
                     slices: SystemdSlices | None = None) -> list[str]:
    """enforceNodeAllocatable system-reserved / kube-reserved: the reservation's cpu (as shares
    or weight), memory and pid as limits of its existing cgroup, as the kubelet sets them; what
    it does not name is left as it is. With the systemd driver the cgroup is a slice systemd
    runs (/system.slice), so they go to it as the unit's properties. Returns what could not be
    set, in words."""
    if slices is not None:
        return _change_reserved_slice(slices, reserved)
    v2 = (root / "cgroup.controllers").is_file()
    writes = []
    if reserved.cpu_millicores is not None:
        shares = cpu_shares(reserved.cpu_millicores)
        writes.append((reserved.directory(root, "cpu") / ("cpu.weight" if v2 else "cpu.shares"),
                       str(cpu_weight(shares) if v2 else shares)))
    if reserved.memory_bytes is not None:
        writes.append((reserved.directory(root, "memory") / ("memory.max" if v2 else "memory.limit_in_bytes"),
                       str(reserved.memory_bytes)))
    if reserved.pids is not None:
        writes.append((reserved.directory(root, "pids") / "pids.max", str(reserved.pids)))
    return _write(writes)


def _change_reserved_slice(slices: SystemdSlices, reserved: ReservedCgroup) -> list[str]:
    props: list[tuple[str, tuple[str, int]]] = []
    if reserved.cpu_millicores is not None:
        shares = cpu_shares(reserved.cpu_millicores)
        props.append(("CPUShares", ("t", shares)) if slices.legacy else ("CPUWeight", ("t", cpu_weight(shares))))
    if reserved.memory_bytes is not None:
        props.append(("MemoryLimit" if slices.legacy else "MemoryMax", ("t", reserved.memory_bytes)))
    if reserved.pids is not None:
        props.append(("TasksMax", ("t", reserved.pids)))
    try:
        slices.change(reserved.unit, props)
    except SlicesError as exc:
        return [str(exc)]
    return []
