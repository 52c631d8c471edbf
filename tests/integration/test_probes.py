"""Liveness, readiness and startup probes on real containers."""

from __future__ import annotations

import os
import signal
import threading
import time

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.integration.conftest import free_port


def sh(node, name, script, **extra):
    return {"name": name, "image": node.image("busybox"), "command": ["sh", "-c", script], **extra}


def ready(pod) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def test_failing_http_liveness_restarts_the_container_with_the_reason(pods):
    pods.write_pod("sickweb", {"containers": [sh(
        # `;` not `&&` before the background part: `a && b && (c) &` would put mkdir itself in
        # the background, racing httpd's chdir into /www.
        pods, "web", "mkdir -p /www; echo ok > /www/healthz; (sleep 4; rm /www/healthz) & "
                     "exec httpd -f -p 8080 -h /www",
        livenessProbe={"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1,
                       "initialDelaySeconds": 1, "failureThreshold": 2})]})

    def restarted_for_404(p):
        last = p["status"]["containerStatuses"][0]["lastState"].get("terminated", {})
        return p["containers"][0]["restartCount"] >= 1 and "404" in last.get("message", "")

    pod = pods.wait_pod("sickweb", restarted_for_404, 60, "a liveness restart after the 404s")
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["message"] == "Liveness probe failed: HTTP probe failed with statuscode: 404"
    probes = pods.admin_get("probe", "/probes", timeout=5).json()
    assert any(p["pod"].endswith("sickweb-testnode") and p["kind"] == "liveness" for p in probes)


def test_readiness_flips_ready_both_ways(pods):
    pods.write_pod("flipper", {"containers": [sh(
        pods, "app", "while true; do touch /tmp/ready; sleep 5; rm -f /tmp/ready; sleep 5; done",
        readinessProbe={"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1,
                        "failureThreshold": 1})]})
    pods.wait_pod("flipper", ready, 30, "Ready=True")
    unready = pods.wait_pod("flipper", lambda p: not ready(p), 30, "Ready=False")
    assert unready["phase"] == "Running" and "running but not ready" in unready["why"]
    back = pods.wait_pod("flipper", ready, 30, "Ready=True again")
    assert back["containers"][0]["restartCount"] == 0


def test_startup_probe_protects_a_slow_starter(pods):
    pods.write_pod("slowstart", {"containers": [sh(
        pods, "app", "sleep 6; touch /tmp/up; sleep 3600",
        startupProbe={"exec": {"command": ["cat", "/tmp/up"]}, "periodSeconds": 1, "failureThreshold": 30},
        livenessProbe={"exec": {"command": ["cat", "/tmp/up"]}, "periodSeconds": 1, "failureThreshold": 1})]})
    pod = pods.wait_pod("slowstart", ready, 40, "the slow starter to become Ready")
    assert pod["containers"][0]["restartCount"] == 0
    cs = pod["status"]["containerStatuses"][0]
    assert cs["started"] and cs["ready"]
    time.sleep(3)
    assert pods.pod("slowstart")["containers"][0]["restartCount"] == 0


def test_tcp_and_exec_probes(pods):
    pods.write_pod("tcpexec", {"containers": [sh(
        pods, "web", "mkdir -p /www && exec httpd -f -p 8080 -h /www",
        readinessProbe={"tcpSocket": {"port": "http"}, "periodSeconds": 1},
        livenessProbe={"exec": {"command": ["true"]}, "periodSeconds": 1},
        ports=[{"name": "http", "containerPort": 8080}])]})
    pods.wait_pod("tcpexec", ready, 30, "Ready via the tcp probe")
    pods.write_pod("tcpclosed", {"containers": [sh(
        pods, "app", "sleep 3600", readinessProbe={"tcpSocket": {"port": 9999}, "periodSeconds": 1})]})
    pod = pods.wait_running("tcpclosed")
    time.sleep(3)
    assert not ready(pods.pod("tcpclosed")) and pod["containers"][0]["restartCount"] == 0


def test_probe_timeout_is_respected(pods):
    pods.write_pod("slowprobe", {"containers": [sh(
        pods, "app", "sleep 3600",
        livenessProbe={"exec": {"command": ["sleep", "10"]}, "timeoutSeconds": 1, "periodSeconds": 2,
                       "failureThreshold": 1})]})
    pod = pods.wait_pod("slowprobe", lambda p: p["containers"][0]["restartCount"] >= 1, 60,
                        "a restart after the probe timed out")
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["message"].startswith("Liveness probe failed:")


def test_grpc_probe_against_a_health_server_on_the_pod_ip(pods):
    port = free_port()
    status = {"value": health_pb2.HealthCheckResponse.SERVING}
    stop = threading.Event()
    servicer = health.HealthServicer()

    def serve():
        server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(2))
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        server.add_insecure_port(f"0.0.0.0:{port}")
        server.start()
        while not stop.wait(0.1):
            servicer.set("", status["value"])
        server.stop(0)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        # A host-network pod's IP is the node's: the probe reaches the server started here.
        pods.write_pod("grpcprobed", {"hostNetwork": True, "containers": [sh(
            pods, "app", "sleep 3600", readinessProbe={"grpc": {"port": port}, "periodSeconds": 1,
                                                       "failureThreshold": 1})]})
        pods.wait_pod("grpcprobed", ready, 30, "Ready via the grpc probe")
        status["value"] = health_pb2.HealthCheckResponse.NOT_SERVING
        pods.wait_pod("grpcprobed", lambda p: not ready(p), 30, "NotReady when the service says NOT_SERVING")
    finally:
        stop.set()
        t.join(5)


def test_probe_service_restart_changes_nothing(pods):
    pods.write_pod("steadyprobed", {"containers": [sh(
        pods, "app", "touch /tmp/ok; sleep 3600",
        readinessProbe={"exec": {"command": ["cat", "/tmp/ok"]}, "periodSeconds": 1},
        livenessProbe={"exec": {"command": ["cat", "/tmp/ok"]}, "periodSeconds": 1})]})
    pods.wait_pod("steadyprobed", ready, 30, "Ready")
    old = pods.service_pid("probe")
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 15
    restarted = False
    while time.monotonic() < deadline:
        pod = pods.pod("steadyprobed")
        assert ready(pod), "readiness flapped while the probe service restarted"
        assert pod["containers"][0]["restartCount"] == 0
        restarted = restarted or (pods.service_pid("probe") != old)
        time.sleep(0.3)
    assert restarted
    assert pods.admin_get("probe", "/readyz", timeout=5).status_code == 200
