"""`kubectl debug` against the real API server: an ephemeral container joins a running pod in its
target's process namespace, runs once, is reported in ephemeralContainerStatuses, and its log and
its stdin work through the kubelet API as for any container."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from tests.cluster.harness import KUBE_BIN
from tests.integration.conftest import wait_for


def _ephemeral(pod: dict, name: str) -> dict | None:
    return next((s for s in pod.get("status", {}).get("ephemeralContainerStatuses", []) if s["name"] == name), None)


def test_kubectl_debug_runs_a_container_in_the_targets_process_namespace(cluster):
    bb = cluster.node.image("busybox")
    cluster.create_pod("debugme", {"containers": [{"name": "app", "image": bb,
                                                   "command": ["sh", "-c", "exec sleep 3600"]}]})
    before = cluster.wait_pod("debugme", lambda p: p.get("status", {}).get("phase") == "Running", 60, "Running")
    [app] = before["status"]["containerStatuses"]

    # ps in the target's process namespace sees the app's `sleep 3600`, not only itself.
    cluster.kubectl("debug", "debugme", f"--image={bb}", "--target=app", "--container=debugger",
                    "--", "sh", "-c", "ps -o pid,args")
    pod = cluster.wait_pod("debugme", lambda p: "terminated" in (_ephemeral(p, "debugger") or {}).get("state", {}),
                           60, "the ephemeral container to run and exit")
    st = _ephemeral(pod, "debugger")
    assert st["state"]["terminated"]["exitCode"] == 0 and st["ready"] is False and st["restartCount"] == 0
    assert st["containerID"].startswith("containerd://")
    logs = cluster.kubectl("logs", "debugme", "-c", "debugger").stdout
    assert "sleep 3600" in logs, logs
    # The pod itself is untouched: same container, still ready, nothing restarted.
    [now] = pod["status"]["containerStatuses"]
    assert now["containerID"] == app["containerID"] and now["ready"] and now["restartCount"] == 0
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"

    # Interactive, as `kubectl debug -i` with a person at the terminal: stdin stays open, a line
    # typed reaches the shell through attach and its answer comes back.
    proc = subprocess.Popen([str(KUBE_BIN / "kubectl"), f"--kubeconfig={cluster.cp.admin_kubeconfig}", "debug", "-i",
                             "debugme", f"--image={bb}", "--target=app", "--container=shell", "--", "sh"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        def answered() -> bool:  # attach takes a moment to connect: type until the answer comes
            proc.stdin.write("echo hello-from-debug\n")
            proc.stdin.flush()
            return any(line.strip() == "hello-from-debug" for line in got)
        wait_for(answered, 60, "the debug shell to answer through attach", interval=1)
        proc.stdin.write("exit 7\n")
        proc.stdin.flush()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    pod = cluster.wait_pod("debugme", lambda p: "terminated" in (_ephemeral(p, "shell") or {}).get("state", {}),
                           60, "the interactive ephemeral container to exit")
    assert _ephemeral(pod, "shell")["state"]["terminated"]["exitCode"] == 7

    # Never restarted: a few syncs later both are the same terminated containers.
    ids = {n: _ephemeral(pod, n)["containerID"] for n in ("debugger", "shell")}
    time.sleep(5)
    later = cluster.pod("debugme")
    for name, cid in ids.items():
        st = _ephemeral(later, name)
        assert st["containerID"] == cid and "terminated" in st["state"] and st["restartCount"] == 0
    cluster.kubectl("delete", "pod", "debugme", "--wait=false")


def test_kubectl_debug_node_runs_a_privileged_pod_in_the_hosts_namespaces(cluster, tmp_path):
    """`kubectl debug node/NAME --profile=sysadmin`: a pod kubectl builds itself (nodeName, the
    host's network, PID and IPC namespaces, the host's / at /host, privileged), as an operator
    uses it to look at and repair a node."""
    bb = cluster.node.image("busybox")
    note = tmp_path / "from-the-host"
    note.write_text("written on the node\n")
    script = (f"cat /host{note}; readlink /proc/self/ns/net; test -d /proc/{os.getpid()} && echo sees-host-pids; "
              "mkdir -p /tmp/m && mount -t tmpfs t /tmp/m && echo privileged; "
              f"echo repaired > /host{tmp_path}/from-the-pod")
    out = cluster.kubectl("debug", f"node/{cluster.node.node_name}", f"--image={bb}", "--profile=sysadmin",
                          "--", "sh", "-c", script).stdout
    name = next(w for w in out.split() if w.startswith("node-debugger-"))
    pod = cluster.wait_pod(name, lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"), 60,
                           "the node debugging pod to finish")
    assert pod["spec"]["hostNetwork"] and pod["spec"]["hostPID"] and pod["spec"]["hostIPC"]
    assert pod["spec"]["containers"][0]["securityContext"]["privileged"] is True
    logs = cluster.kubectl("logs", name).stdout.splitlines()
    assert pod["status"]["phase"] == "Succeeded", (pod["status"], logs)
    assert logs == ["written on the node", os.readlink("/proc/self/ns/net"), "sees-host-pids", "privileged"], logs
    assert (tmp_path / "from-the-pod").read_text() == "repaired\n", "what the pod wrote under /host is on the node"
    assert pod["status"]["podIP"] == pod["status"]["hostIP"], "a hostNetwork pod's IP is the node's"
    cluster.kubectl("delete", "pod", name, "--wait=true", timeout=60)
