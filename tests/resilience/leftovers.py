"""What must be gone after a fault: one ready sandbox per running pod and no stopped one, and
host-local and the pod bridge holding exactly the running pods' addresses and veths."""

from __future__ import annotations

import ipaddress
import subprocess

from shared.host.cni import BRIDGE, cni_ipam_dir
from shared.runtime.cri.labels import MANAGED_BY


def ipam_addresses(node) -> set[str]:
    found = set()
    for net in cni_ipam_dir(node.root).iterdir():
        for entry in net.iterdir():
            try:
                found.add(str(ipaddress.ip_address(entry.name)))
            except ValueError:
                continue  # host-local's lock and last_reserved_ip files
    return found


def bridge_ports() -> int:
    out = subprocess.run(["ip", "-o", "link", "show", "master", BRIDGE], capture_output=True, text=True).stdout
    return len(out.splitlines())


def runtime_pods(node) -> tuple[list, list]:
    async def go(cri):
        return (await cri.list_pod_sandbox({MANAGED_BY: "true"}), await cri.list_containers({MANAGED_BY: "true"}))
    return node.runtime(go)


def pod_mounts(node, uid: str) -> list[str]:
    where = str(node.root / "pods" / uid)
    return [line.split()[1] for line in open("/proc/mounts") if line.split()[1].startswith(where)]


def consistent(node) -> bool:
    """One ready sandbox per running pod; no stopped sandbox left; host-local and the bridge
    hold exactly the running pods' addresses and veths."""
    sandboxes, _ = runtime_pods(node)
    ready = [sb for sb in sandboxes if sb.state == 0]
    pods = [p for p in node.status()["pods"] if p["phase"] == "Running"]
    return (len(ready) == len(sandboxes) == len(pods)
            and ipam_addresses(node) == {p["podIP"] for p in pods}
            and bridge_ports() == len(pods))
