"""What a node agent holds on its host, counted, so that a run of pods created and deleted can be
checked for what it left behind (the churn test, tests/pod_churn/test_pod_churn.py, and the churn
benchmark, bench/churn.py).

Every count is of things a deleted pod must give back: its sandbox and containers in the runtime,
their shims, its network namespace, veth, IP lease and NAT chain, its mounts, its directory under
the agent's root, its cgroups, its store rows; and, per agent process, open file descriptors and
memory (RSS), connections their peer closed and they never did, and, for pykubelet's services,
event-bus subscriptions. A count that only grows
as pods come and go is a leak.

The network namespaces, veths and NAT chains are the host's: only one agent may run pods while an
inventory is taken. Everything else is the agent's own (its root dir, its containerd).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from shared.host.cni import BRIDGE
from shared.runtime.cri import CRIClient

IP_TIMEOUT = 10
NETNS_DIR = Path("/var/run/netns")
# cgroupfs layout, cgroup v1 and v2: every pod cgroup of either agent is below one of these.
KUBEPODS_CGROUPS = (Path("/sys/fs/cgroup/cpu/kubepods"), Path("/sys/fs/cgroup/memory/kubepods"),
                    Path("/sys/fs/cgroup/pids/kubepods"), Path("/sys/fs/cgroup/kubepods"))
# host-local's own bookkeeping in a network's lease directory: not leases.
IPAM_BOOKKEEPING = ("last_reserved_ip.", "lock")


@dataclass(frozen=True)
class Agent:
    """Where an agent keeps what the inventory counts."""
    endpoint: str  # its containerd, unix://...
    root: Path  # mounts below it are its pods'
    pods_dir: Path  # one directory per pod
    ipam_dir: Path  # host-local's dataDir: one directory per network, one file per lease
    store: Path | None = None  # pykubelet's state store
    pids: dict[str, int] = field(default_factory=dict)  # its processes, by name
    bus_subscriptions: dict[str, float] = field(default_factory=dict)  # per service, from its /metrics


@dataclass
class Inventory:
    counts: dict[str, int]  # what pods hold, node-wide
    fds: dict[str, int]  # per agent process
    rss_mib: dict[str, float]  # per agent process

    def grown(self, before: Inventory, fd_slack: int = 0) -> dict[str, tuple[int, int]]:
        """What this inventory holds more of than `before`: name -> (before, now). File
        descriptors may differ by `fd_slack` (connections a process opens and closes on its own:
        a pooled API connection, a log file reopened)."""
        out = {k: (before.counts.get(k, 0), v) for k, v in self.counts.items() if v > before.counts.get(k, 0)}
        out |= {f"open fds of {k}": (before.fds[k], v) for k, v in self.fds.items()
                if k in before.fds and v > before.fds[k] + fd_slack}
        return out


BUS_SUBSCRIPTIONS_METRIC = "pykubelet_bus_subscriptions"


def bus_subscriptions(metrics: dict[str, str]) -> dict[str, float]:
    """Per service, the bus subscriptions its /metrics text (`metrics[service]`) reports open."""
    out = {}
    for service, text in metrics.items():
        for line in text.splitlines():
            if line.startswith(BUS_SUBSCRIPTIONS_METRIC + " "):
                out[service] = float(line.split()[1])
    return out


def _count_dirs(top: Path) -> int:
    return sum(len(dirs) for _, dirs, _ in os.walk(top)) if top.is_dir() else 0


def _leases(ipam_dir: Path) -> int:
    if not ipam_dir.is_dir():
        return 0
    return sum(1 for net in ipam_dir.iterdir() if net.is_dir()
               for f in net.iterdir() if not f.name.startswith(IPAM_BOOKKEEPING))


def _veths_on_bridge() -> int:
    res = subprocess.run(["ip", "-o", "link", "show", "master", BRIDGE], capture_output=True, text=True,
                         timeout=IP_TIMEOUT)
    return len(res.stdout.splitlines()) if res.returncode == 0 else 0


def _nat_chains() -> int:
    """The CNI bridge plugin's per-sandbox masquerade chains (CNI-<hash>)."""
    res = subprocess.run(["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True, timeout=30)
    return sum(1 for line in res.stdout.splitlines() if line.startswith("-N CNI-"))


def _mounts_below(root: Path) -> int:
    prefix = str(root).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        return sum(1 for line in f if line.split()[4].startswith(prefix))


def _shims(endpoint: str) -> int:
    """containerd shims serving this containerd (their command line names its address)."""
    address = endpoint.removeprefix("unix://")
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"containerd-shim" in argv[0] and address.encode() in argv:
            n += 1
    return n


def _store_rows(store: Path) -> dict[str, int]:
    # Read-only and immutable-free: the store's writers keep writing while this reads.
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
                  if not r[0].startswith("sqlite_")]
        return {f"store rows: {t}": con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    finally:
        con.close()


HALF_CLOSED = "connections closed by the peer"


def _closed_by_peer(pids: dict[str, int]) -> dict[str, int]:
    """Per process: TCP connections the other end closed and it never did (peer address: count)."""
    res = subprocess.run(["ss", "-tnpH", "state", "close-wait"], capture_output=True, text=True, timeout=IP_TIMEOUT)
    out: dict[str, int] = {}
    for line in res.stdout.splitlines():
        for name, pid in pids.items():
            if f"pid={pid}," in line:
                key = f"{HALF_CLOSED}: {name} -> {line.split()[3]}"
                out[key] = out.get(key, 0) + 1
    return out


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


async def _runtime_counts(endpoint: str) -> dict[str, int]:
    c = CRIClient(endpoint, timeout=30)
    try:
        return {"sandboxes": len(await c.list_pod_sandbox({})), "containers": len(await c.list_containers())}
    finally:
        await c.close()


def take(agent: Agent) -> Inventory:
    """Count what `agent` holds now. Call it from a thread if an event loop runs."""
    counts = asyncio.run(_runtime_counts(agent.endpoint))
    counts |= {
        "containerd shims": _shims(agent.endpoint),
        "network namespaces": len([n for n in os.listdir(NETNS_DIR) if n.startswith("cni-")])
        if NETNS_DIR.is_dir() else 0,
        "veths on the pod bridge": _veths_on_bridge(),
        "IP leases": _leases(agent.ipam_dir),
        "NAT chains": _nat_chains(),
        "mounts": _mounts_below(agent.root),
        "pod directories": len(list(agent.pods_dir.iterdir())) if agent.pods_dir.is_dir() else 0,
        "pod cgroups": sum(_count_dirs(top) for top in KUBEPODS_CGROUPS),
    }
    if agent.store is not None:
        counts |= _store_rows(agent.store)
    if agent.pids:
        counts |= _closed_by_peer(agent.pids)
    if agent.bus_subscriptions:
        counts["bus subscriptions"] = int(sum(agent.bus_subscriptions.values()))
    return Inventory(counts=counts, fds={n: _fds(p) for n, p in agent.pids.items()},
                     rss_mib={n: _rss_mib(p) for n, p in agent.pids.items()})
