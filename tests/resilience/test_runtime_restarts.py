"""containerd killed in the middle of creating a pod and in the middle of deleting one: the
pod ends up as asked, and nothing of the interrupted work is left behind (sandboxes,
containers, mounts, veths, addresses from host-local)."""

from __future__ import annotations

import os
import signal
import time

from tests.integration.conftest import wait_for
from tests.resilience.leftovers import consistent, ipam_addresses, pod_mounts


def web_pod(node) -> dict:
    return {"containers": [{"name": "web", "image": node.image("web"),
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}]}


def kill_containerd(node) -> None:
    pid_file = node.root / "run" / "containerd.pid"
    old = int(pid_file.read_text())
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: int(pid_file.read_text()) != old, 60, "the supervisor to restart containerd")


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
