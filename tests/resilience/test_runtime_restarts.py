"""containerd killed in the middle of creating a pod and in the middle of deleting one: the
pod ends up as asked, and nothing of the interrupted work is left behind (sandboxes,
containers, mounts, veths, addresses from host-local)."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import time

from shared.cni import BRIDGE, cni_ipam_dir
from shared.cri.labels import MANAGED_BY
from tests.integration.conftest import wait_for


def web_pod(node) -> dict:
    return {"containers": [{"name": "web", "image": node.image("web"),
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}]}


def kill_containerd(node) -> None:
    pid_file = node.root / "run" / "containerd.pid"
    old = int(pid_file.read_text())
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: int(pid_file.read_text()) != old, 60, "the supervisor to restart containerd")


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


def test_containerd_killed_while_a_pod_is_created(node):
    node.write_pod("midcreate", web_pod(node))
    uid = wait_for(lambda: (p := node.pod("midcreate")) and p["uid"], 30, "the pod to be known")
    wait_for(lambda: node.sandboxes_of(uid), 30, "its sandbox to be created")
    started = time.monotonic()
    kill_containerd(node)
    pod = node.wait_running("midcreate", 120)
    wait_for(lambda: consistent(node), 90, "one sandbox, address and veth per running pod")
    took = time.monotonic() - started
    [sandbox] = node.sandboxes_of(uid)
    assert sandbox.state == 0 and pod["podIP"] in ipam_addresses(node)
    print(f"\ncontainerd killed during a pod's creation: pod Running and nothing left over after {took:.1f}s")
    node.remove("midcreate.yaml")
    wait_for(lambda: node.pod("midcreate") is None, 60, "midcreate removed")


def test_containerd_killed_while_a_pod_is_deleted(node):
    node.write_pod("middelete", web_pod(node))
    pod = node.wait_running("middelete", 60)
    uid, ip = pod["uid"], pod["podIP"]
    assert pod_mounts(node, uid), "the memory emptyDir is mounted"
    node.remove("middelete.yaml")
    wait_for(lambda: (p := node.pod("middelete")) is None or p["deleting"], 30, "the deletion to begin")
    started = time.monotonic()
    kill_containerd(node)
    wait_for(lambda: node.pod("middelete") is None, 120, "the pod to be gone")
    wait_for(lambda: not node.sandboxes_of(uid) and not node.containers_of(uid), 60, "its sandbox and containers gone")
    wait_for(lambda: not pod_mounts(node, uid), 60, "its mounts gone")
    wait_for(lambda: ip not in ipam_addresses(node) and consistent(node), 60, "its address and veth released")
    took = time.monotonic() - started
    print(f"\ncontainerd killed during a pod's deletion: everything of it gone after {took:.1f}s")
