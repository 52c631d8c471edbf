"""The supervisor (`pykubelet up`) killed: the node runs on, a new `up` adopts it without
touching a pod, and `down` stops everything the dead supervisor started."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from services.supervisor.leftovers import pid_alive
from tests.integration.conftest import PYKUBELET, REPO, relaunch_node, wait_for


def steady_pod(node, name: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: web
      image: {node.image('web')}
"""


def kill_supervisor(node) -> None:
    node.proc.send_signal(signal.SIGKILL)
    node.proc.wait(timeout=10)


def status_rc(node) -> tuple[int, dict]:
    res = node.cli("status", "-o", "json", check=False)
    return res.returncode, json.loads(res.stdout)


def containers(node, uid: str) -> list[tuple[str, int]]:
    return sorted((st.id, st.metadata.attempt) for st in node.container_statuses(uid))


def test_a_new_up_adopts_what_a_killed_supervisor_left_running(node):
    node.write("steady.yaml", steady_pod(node, "steady"))
    uid = node.wait_running("steady")["uid"]
    before = containers(node, uid)
    sandboxes = [sb.id for sb in node.sandboxes_of(uid)]

    kill_supervisor(node)
    # Nothing went with it: the services still run the node and say so.
    rc, status = status_rc(node)
    assert rc == 0 and status["node"]["running"], status["notCurrent"]
    assert node.pod("steady")["phase"] == "Running"

    started = time.monotonic()
    relaunch_node(node)
    ready_in = time.monotonic() - started
    assert "the previous node supervisor is gone" in node.log.read_text()
    wait_for(lambda: status_rc(node)[0] == 0, 30, "status current again")
    recovered_in = time.monotonic() - started
    pod = node.wait_running("steady", timeout=30)
    assert containers(node, uid) == before, "the same containers, never restarted"
    assert [sb.id for sb in node.sandboxes_of(uid)] == sandboxes
    assert all(c["restartCount"] == 0 for c in pod["containers"])
    print(f"\nsupervisor SIGKILL: new `up` ready in {ready_in:.1f}s, status current after {recovered_in:.1f}s")


def test_down_stops_what_a_killed_supervisor_left_running(node):
    node.write("left.yaml", steady_pod(node, "left"))
    uid = node.wait_running("left")["uid"]
    [(container_id, _)] = containers(node, uid)
    container_pid = node.runtime_pid("container", container_id)
    started = {f.stem: int(f.read_text()) for f in (node.root / "run").glob("*.pid") if f.stem != "supervisor"}
    assert {"nats", "containerd", "pod-sync", "registry"} <= set(started)

    kill_supervisor(node)
    res = subprocess.run([*PYKUBELET, "down", "--root-dir", str(node.root)], capture_output=True, text=True,
                         timeout=240, cwd=REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "is gone; stopping what it left running" in res.stdout
    still = {name: pid for name, pid in started.items() if pid_alive(pid)}
    assert not still, f"left running after down: {still}"
    assert not pid_alive(container_pid), "the pod's container was not removed"
    assert not list((node.root / "run").glob("*.pid"))

    # The stopped node's last records are not passed off as current.
    rc, status = status_rc(node)
    assert rc == 3 and not status["node"]["running"]
    left = next(p for p in status["pods"] if p["name"].startswith("left-"))
    assert (left["phase"], left["podIP"], left["recordedPhase"]) == ("Unknown", "", "Running")
    table = node.cli("status", check=False).stdout
    assert table.startswith("node: not running (stopped at ")
    claims = [line for line in table.splitlines()[1:] if "running" in line.lower() and "last recorded" not in line]
    assert not claims, table

    again = subprocess.run([*PYKUBELET, "down", "--root-dir", str(node.root)], capture_output=True, text=True,
                           timeout=60, cwd=REPO)
    assert again.returncode == 0 and "no node is running" in again.stdout
