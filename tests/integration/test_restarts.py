"""Containers that exit are restarted per restartPolicy; pod-sync restarts touch nothing."""

from __future__ import annotations

import os
import signal

import httpx

from tests.integration.conftest import wait_for


def exiting_pod(node, name, policy, code):
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 2
  restartPolicy: {policy}
  containers:
    - name: job
      image: {node.image('busybox')}
      command: ["sh", "-c", "echo run; sleep 1; exit {code}"]
"""


def test_restart_policies(pods):
    pods.write("always.yaml", exiting_pod(pods, "always", "Always", 1))
    pods.write("never.yaml", exiting_pod(pods, "never", "Never", 3))
    pods.write("onfailure.yaml", exiting_pod(pods, "onfailure", "OnFailure", 0))

    always = pods.wait_pod("always", lambda p: p["containers"][0]["restartCount"] >= 1
                           and p["containers"][0]["lastExitCode"] == 1, 60, "a restart after exit 1")
    assert always["phase"] == "Running"

    never = pods.wait_pod("never", lambda p: p["phase"] == "Failed", 60, "phase Failed")
    [job] = never["containers"]
    assert job["state"] == "terminated" and job["restartCount"] == 0 and job["lastExitCode"] == 3
    assert "exited with code 3" in never["why"]

    done = pods.wait_pod("onfailure", lambda p: p["phase"] == "Succeeded", 60, "phase Succeeded")
    assert done["containers"][0]["restartCount"] == 0

    # The crash-looping one is held back by the back-off and says so.
    looping = pods.wait_pod("always", lambda p: p["containers"][0]["reason"] == "CrashLoopBackOff",
                            60, "CrashLoopBackOff")
    assert "keeps crashing" in looping["why"]


def test_killing_pod_sync_restarts_no_container(pods):
    pods.write("steady.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: steady}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
    - name: web
      image: {pods.image('web')}
    - name: sidecar
      image: {pods.image('busybox')}
      command: ["sleep", "3600"]
""")
    pod = pods.wait_running("steady")
    before = {c.id: c.metadata.attempt for c in pods.containers_of(pod["uid"])}
    sandboxes_before = [s.id for s in pods.sandboxes_of(pod["uid"])]
    old_pid = pods.service_pid("pod-sync")

    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: pods.service_pid("pod-sync") != old_pid, 30, "the supervisor to restart pod-sync")
    wait_for(lambda: pods.admin_get("pod-sync", "/readyz", timeout=2).status_code == 200, 30,
             "the new pod-sync to be ready")
    # Let it relist and resync everything a few times.
    wait_for(lambda: "kubelet_pleg_relist_duration_seconds_count" in
             pods.admin_get("pod-sync", "/metrics", timeout=2).text
             and _relists(pods) >= 3, 30, "three PLEG relists by the new pod-sync")

    after = {c.id: c.metadata.attempt for c in pods.containers_of(pod["uid"])}
    assert after == before, "no container was created, removed or restarted"
    assert [s.id for s in pods.sandboxes_of(pod["uid"])] == sandboxes_before
    # Current again once the status-reporter has caught up with the new pod-sync.
    now = pods.wait_running("steady", timeout=30)
    assert [c["restartCount"] for c in now["containers"]] == [0, 0]
    assert httpx.get(f"http://{now['podIP']}/", timeout=5).status_code == 200


def _relists(node) -> float:
    for line in node.admin_get("pod-sync", "/metrics", timeout=2).text.splitlines():
        if line.startswith("kubelet_pleg_relist_duration_seconds_count"):
            return float(line.split()[-1])
    return 0


def test_nats_restart_touches_no_pod_and_new_pods_still_start(pods):
    pods.write("calm.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: calm}}
spec:
  containers: [{{name: web, image: "{pods.image('web')}"}}]
""")
    pod = pods.wait_running("calm")
    before = {c.id for c in pods.containers_of(pod["uid"])}
    old_pid = pods.service_pid("nats")
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: pods.service_pid("nats") != old_pid, 30, "the supervisor to restart nats-server")
    wait_for(lambda: all(pods.admin_get(s, "/readyz", timeout=2).status_code == 200
                         for s in ("pod-sync", "status-reporter", "network")), 30,
             "services to reconnect to the bus")
    pods.write("after-nats.yaml", f"""apiVersion: v1
kind: Pod
metadata: {{name: after-nats}}
spec:
  containers: [{{name: web, image: "{pods.image('web')}"}}]
""")
    pods.wait_running("after-nats")
    assert {c.id for c in pods.containers_of(pod["uid"])} == before
    assert pods.pod("calm")["containers"][0]["restartCount"] == 0
