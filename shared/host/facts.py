"""Facts about this host that several services need."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

CAP_SYS_RESOURCE = 24


def kernel_refuses_negative_oom_score_adj(status_file: str = "/proc/self/status") -> bool:
    """Without CAP_SYS_RESOURCE the kernel refuses a negative oom_score_adj: runc then fails every
    sandbox ("can't get final child's PID from pipe: EOF") unless containerd restricts it."""
    caps = {}
    for line in Path(status_file).read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("CapEff", "CapBnd"):
            caps[key] = int(value.strip(), 16)
    return any(not (v >> CAP_SYS_RESOURCE) & 1 for v in caps.values())


def arch() -> str:
    """The architecture as Go names it (GOARCH), which is what Kubernetes labels use."""
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def node_labels(name: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels the node registers with (--node-labels on top, as the kubelet lets them
    override its own); pod admission matches nodeSelector and node affinity against these."""
    return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": arch(),
            "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": arch(), **(extra or {})}


def cpu_capacity_millicores() -> int:
    return (len(os.sched_getaffinity(0)) or os.cpu_count() or 1) * 1000


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's fields in bytes (values with a kB unit scaled, counts as they are)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            try:
                out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
            except ValueError:
                pass
    return out


def task_max(proc: Path = Path("/proc")) -> int | None:
    """How many tasks the kernel allows at once: the lesser of kernel.pid_max and
    kernel.threads-max, as the kubelet counts the node's pid capacity; None when neither reads."""
    limits = []
    for name in ("pid_max", "threads-max"):
        try:
            limits.append(int((proc / "sys/kernel" / name).read_text()))
        except (OSError, ValueError):
            continue
    return min(limits) if limits else None


def memory_capacity_bytes(meminfo: str = "/proc/meminfo") -> int:
    total = parse_meminfo(Path(meminfo).read_text()).get("MemTotal")
    if total is None:
        raise RuntimeError(f"no MemTotal in {meminfo}")
    return total


class NodeIPError(RuntimeError):
    pass


def node_ip() -> str:
    """The address of the interface that holds the default route (the kubelet's InternalIP).
    Never a guess: without one, NodeIPError says to pass --node-ip."""
    try:
        route = subprocess.run(["ip", "-o", "-4", "route", "show", "default"], capture_output=True,
                               text=True, timeout=5).stdout.split()
        dev = route[route.index("dev") + 1]
        addr = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", dev], capture_output=True,
                              text=True, timeout=5).stdout.split()
        return addr[addr.index("inet") + 1].split("/")[0]
    except (ValueError, IndexError, OSError, subprocess.SubprocessError):
        raise NodeIPError("cannot find this node's IP address (no IPv4 default route with an address); "
                          "pass --node-ip ADDRESS") from None


def node_address(node_ip_flag: str) -> str:
    """The node's InternalIP: --node-ip (the settings' node_ip), else the default route's address."""
    return node_ip_flag or node_ip()


def read_fact(path: str) -> str:
    """A one-line host fact file (machine id, boot id, ...); empty when absent."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def machine_id() -> str:
    return read_fact("/etc/machine-id")


def os_version(os_release: str = "/etc/os-release") -> str:
    """The host's PRETTY_NAME, as cAdvisor's ContainerOsVersion (the Node's osImage,
    cadvisor_version_info's osVersion); "Unknown" without one, as cAdvisor says."""
    for line in read_fact(os_release).splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return "Unknown"


def boot_id() -> str:
    return read_fact("/proc/sys/kernel/random/boot_id")


def system_uuid() -> str:
    """DMI product UUID (lower case, as the kubelet reports it); empty on machines without DMI."""
    return read_fact("/sys/class/dmi/id/product_uuid").lower()


def boot_time(stat_file: str = "/proc/stat") -> float:
    """When this host booted, in seconds since the epoch (btime in /proc/stat)."""
    for line in Path(stat_file).read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise RuntimeError(f"no btime in {stat_file}")
