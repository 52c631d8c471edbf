"""CPU, memory and OOM settings for containers, and the QoS cgroup a pod lives in (cgroupfs driver).

The kubelet's layout: /kubepods (Guaranteed pods directly below), /kubepods/burstable,
/kubepods/besteffort, then pod<uid>, then one cgroup per container that the runtime creates.
With cgroupRoot set, /kubepods is below it (/custom/kubepods).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cri_api.v1 import api_pb2 as cri

from services.pod_sync.swap import apply_swap
from services.pod_sync.systemd_slices import SystemdSlices
from shared.host.swap import NodeSwap
from shared.model.cgroup_names import KUBEPODS
from shared.model.podspec import Container, Pod
from shared.model.qos import pod_level
from shared.model.quantity import millicores, to_bytes

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD = 100_000
MIN_SHARES = 2
MAX_SHARES = 262_144
MIN_QUOTA = 1000


def cpu_shares(milli: int) -> int:
    """cpu.shares for millicores (the kubelet's MilliCPUToShares)."""
    return min(MAX_SHARES, max(MIN_SHARES, milli * 1024 // 1000))


def cpu_quota(milli: int, period: int = CPU_PERIOD) -> int:
    """cfs_quota_us for millicores over a CFS period in microseconds (the kubelet's MilliCPUToQuota)."""
    return max(MIN_QUOTA, milli * period // 1000)


def cpu_weight(shares: int) -> int:
    """cgroup v2's cpu.weight for v1 shares (the kubelet's and runc's conversion)."""
    return 10_000 if shares >= MAX_SHARES else 1 + ((shares - 2) * 9999) // 262_142
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000


def pod_cgroup_parent(pod: Pod, qos: str, kubepods: str = KUBEPODS) -> str:
    tier = {"Guaranteed": "", "Burstable": "/burstable", "BestEffort": "/besteffort"}[qos]
    return f"{kubepods}{tier}/pod{pod.uid}"


def _pod_level_share(pod: Pod | None) -> int:
    """With a pod-level memory request, what it holds beyond its containers' requests, shared
    evenly among them (the kubelet's oom_score_adj for pod-level resources)."""
    own = pod_level(pod) if pod is not None else None
    asked = own.request("memory") if own is not None else None
    if pod is None or asked is None:
        return 0
    everyone = pod.spec.initContainers + pod.spec.containers
    spoken = sum(to_bytes(q) for c in pod.spec.containers if (q := c.resources.request("memory")) is not None)
    return max(0, to_bytes(asked) - spoken) // len(everyone)


def oom_score_adj(c: Container, qos: str, memory_capacity: int, pod: Pod | None = None) -> int:
    if qos == "Guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "BestEffort":
        return BESTEFFORT_OOM_SCORE_ADJ
    request = c.resources.request("memory")
    held = (to_bytes(request) if request is not None else 0) + _pod_level_share(pod)
    adj = 1000 - (1000 * held) // memory_capacity
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adj == BESTEFFORT_OOM_SCORE_ADJ:
        return adj - 1
    return adj


def own_oom_score_adj() -> int:
    try:
        return int(Path("/proc/self/oom_score_adj").read_text())
    except (OSError, ValueError):
        return 0


def container_resources(c: Container, qos: str, memory_capacity: int,
                        oom_floor: int | None, pod: Pod | None = None, cpuset: str = "",
                        guaranteed_mems: str = "", swap: NodeSwap | None = None,
                        cfs_quota: bool = True, cpu_period: int = CPU_PERIOD) -> cri.LinuxContainerResources:
    """oom_floor: the lowest oom_score_adj the kernel lets us set here (None: no limit). A
    container without a limit of its own in a pod with pod-level limits gets the pod's.
    cpuset: the CPUs it may run on (services/pod_sync/cpu_manager.py; "": the runtime's default).
    guaranteed_mems: the NUMA nodes a Guaranteed container's memory comes from (the memory
    manager's Static policy; "": the runtime's default). swap: the node's swap (services/pod_sync/swap.py;
    None: no swap setting). cfs_quota: cpuCFSQuota; false leaves CPU limits without a CFS quota.
    cpu_period: cpuCFSQuotaPeriod in microseconds, the period a CPU limit is a quota of."""
    r = c.resources
    own = pod_level(pod) if pod is not None else None
    cpu_limit = r.limits.get("cpu", own.limits.get("cpu") if own else None)
    memory_limit = r.limits.get("memory", own.limits.get("memory") if own else None)
    cpu_request = r.requests.get("cpu", cpu_limit)
    shares = cpu_shares(millicores(cpu_request)) if cpu_request is not None else MIN_SHARES
    res = cri.LinuxContainerResources(cpu_shares=shares, cpu_period=cpu_period, cpuset_cpus=cpuset,
                                      cpuset_mems=guaranteed_mems if qos == "Guaranteed" else "")
    if cpu_limit is not None and cfs_quota:
        res.cpu_quota = cpu_quota(millicores(cpu_limit), cpu_period)
    if memory_limit is not None:
        res.memory_limit_in_bytes = to_bytes(memory_limit)
    adj = oom_score_adj(c, qos, memory_capacity, pod)
    res.oom_score_adj = max(adj, oom_floor) if oom_floor is not None else adj
    if swap is not None and pod is not None:
        apply_swap(res, pod, c, qos, swap, memory_capacity)
    return res


def remove_pod_cgroups(parent: str, slices: SystemdSlices | None = None) -> None:
    """The runtime removes container cgroups; the pod's own cgroup is ours to remove (v1 and v2),
    or systemd's, when it is a slice."""
    if slices is not None:
        slices.remove(parent)
        return
    rel = parent.lstrip("/")
    candidates = [CGROUP_ROOT / rel] + [d / rel for d in CGROUP_ROOT.iterdir() if d.is_dir()] \
        if CGROUP_ROOT.is_dir() else []
    for path in candidates:
        if path.is_dir():
            try:
                os.rmdir(path)
            except OSError as exc:
                log.debug("pod cgroup %s not removed: %s", path, exc)
