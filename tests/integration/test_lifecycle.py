"""Pod lifecycle semantics on real containerd: order, restarts, hooks, resources, admission."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from tests.integration.conftest import (
    CRASH_BACKOFF_INITIAL,
    CRASH_BACKOFF_MAX,
    LOG_MAX_FILES,
    LOG_MAX_SIZE,
    LOG_MONITOR_EVERY,
    wait_for,
)
from tests.integration.log_compression import compression_spans, two_bursts
from tests.integration.slow_registry import most_at_once

RUNNING, EXITED = 1, 2


def sh(node, name, script, **extra):
    return {"name": name, "image": node.image("busybox"), "command": ["sh", "-c", script], **extra}


def test_init_containers_run_in_order_then_app(pods):
    pods.write_pod("ordered", {"initContainers": [sh(pods, "first", "sleep 1"), sh(pods, "second", "sleep 1")],
                               "containers": [sh(pods, "app", "sleep 3600")]})
    pod = pods.wait_running("ordered")
    assert [c["name"] for c in pod["containers"]] == ["first", "second", "app"]
    assert [c["state"] for c in pod["containers"]] == ["terminated", "terminated", "running"]
    by_name = {st.metadata.name: st for st in pods.container_statuses(pod["uid"])}
    assert by_name["first"].finished_at <= by_name["second"].created_at
    assert by_name["second"].finished_at <= by_name["app"].created_at
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["Initialized"] == "True" and conditions["Ready"] == "True"


def test_sidecar_starts_before_and_stops_after_the_app(pods):
    pods.write_pod("withsidecar", {
        "restartPolicy": "Never",
        "initContainers": [sh(pods, "proxy", "trap 'sleep 1; exit 0' TERM; while true; do sleep 0.2; done",
                              restartPolicy="Always"),
                           sh(pods, "setup", "true")],
        "containers": [sh(pods, "app", "sleep 3; exit 0")]})
    done = pods.wait_pod("withsidecar", lambda p: p["phase"] == "Succeeded", 60, "the app to finish")
    by_name = {st.metadata.name: st for st in pods.container_statuses(done["uid"])}
    proxy, setup, app = by_name["proxy"], by_name["setup"], by_name["app"]
    assert proxy.started_at < setup.created_at < app.created_at, "sidecar first, then init, then app"
    assert proxy.state == EXITED and app.state == EXITED
    assert proxy.finished_at >= app.finished_at, "the sidecar ran until after the app ended"
    sidecar = next(c for c in done["status"]["initContainerStatuses"] if c["name"] == "proxy")
    assert sidecar["restartCount"] == 0


def test_crash_loop_back_off_grows_to_the_configured_cap(pods):
    pods.write_pod("crasher", {"containers": [sh(pods, "app", "exit 2")]})
    pod = pods.wait_pod("crasher", lambda p: p["containers"][0]["restartCount"] >= 5, 90, "five restarts")
    starts = sorted(st.created_at / 1e9 for st in pods.container_statuses(pod["uid"]))
    # Only the newest dead instance is kept, so read the delays from restart attempts instead.
    assert pod["containers"][0]["lastExitCode"] == 2
    looping = pods.wait_pod("crasher", lambda p: p["containers"][0]["reason"] == "CrashLoopBackOff", 30,
                            "CrashLoopBackOff")
    message = looping["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    delay = float(message.split("back-off ")[1].split("s ")[0])
    assert CRASH_BACKOFF_INITIAL <= delay <= CRASH_BACKOFF_MAX, message
    assert len(starts) <= 2  # one running/exited instance + one kept dead instance


def test_restart_delays_follow_the_back_off(pods):
    """Record when each attempt starts: gaps grow from the initial delay and stop at the cap."""
    pods.write_pod("timed", {"containers": [sh(pods, "app", "exit 1")]})
    seen: dict[int, float] = {}

    def record():
        p = pods.pod("timed")
        for st in pods.container_statuses(p["uid"]) if p else []:
            seen.setdefault(st.metadata.attempt, st.created_at / 1e9)
        return len(seen) >= 6

    wait_for(record, 90, "six attempts", interval=0.1)
    times = [seen[a] for a in sorted(seen)]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # The first restart waits for no back-off (only for the next relist): faster than later ones.
    assert gaps[0] < min(gaps[2:]), f"first restart is immediate: {gaps}"
    for gap in gaps[1:]:
        assert gap >= CRASH_BACKOFF_INITIAL - 0.2, f"restarted before the back-off: {gaps}"
        assert gap <= CRASH_BACKOFF_MAX + 5, f"waited far beyond the cap: {gaps}"
    assert max(gaps) >= CRASH_BACKOFF_MAX - 0.5, f"delays never reached the cap: {gaps}"


def test_image_pull_policies(pods):
    present = pods.image("busybox")
    pods.write_pod("policies", {"containers": [
        sh(pods, "ifnotpresent", "sleep 3600", imagePullPolicy="IfNotPresent"),
        sh(pods, "always", "sleep 3600", imagePullPolicy="Always")]})
    pod = pods.wait_running("policies")
    notes = {c["name"]: c["image_pull"] for c in _runtime_containers(pods, pod)}
    assert notes["ifnotpresent"] == "image already present on machine"
    assert notes["always"].startswith("pulled image in")
    pods.write_pod("neverpull", {"containers": [{"name": "app", "image": f"{pods.registry}/pykubelet/absent:1",
                                                  "imagePullPolicy": "Never"}]})
    never = pods.wait_pod("neverpull", lambda p: p["containers"][0]["reason"] == "ErrImageNeverPull", 30,
                          "ErrImageNeverPull")
    assert "is not present with pull policy of Never" in never["why"]
    pods.write_pod("missingimage", {"containers": [{"name": "app", "image": f"{pods.registry}/pykubelet/absent:1"}]})
    pods.wait_pod("missingimage", lambda p: p["containers"][0]["reason"] == "ErrImagePull", 30, "ErrImagePull")
    backoff = pods.wait_pod("missingimage", lambda p: p["containers"][0]["reason"] == "ImagePullBackOff", 30,
                            "ImagePullBackOff")
    assert "Back-off pulling image" in backoff["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert present  # the demo image was pushed by the fixture


def _runtime_containers(node, pod):
    body = node.admin_get("pod-sync", "/pods", timeout=5).json()
    return next(p for p in body if p["uid"] == pod["uid"])["containers"]


def test_pre_stop_runs_before_the_stop(pods):
    path = pods.write_pod("prestop", {"terminationGracePeriodSeconds": 10, "containers": [sh(
        pods, "app", "trap 'exit 0' TERM; while true; do sleep 0.2; done",
        lifecycle={"preStop": {"exec": {"command": ["sh", "-c", "echo prestop-ran > /proc/1/fd/1"]}}})]})
    pod = pods.wait_running("prestop")
    log_dir = next((pods.root / "pod-logs").glob(f"default_prestop-*_{pod['uid']}"))
    path.unlink()
    wait_for(lambda: pods.pod("prestop") is None, 30, "the pod to stop")
    assert "prestop-ran" in (log_dir / "app" / "0.log").read_text()


def test_post_start_hook_runs_and_its_failure_kills_the_container(pods):
    pods.write_pod("poststart", {"containers": [
        sh(pods, "ok", "sleep 3600",
           lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "echo poststart-ran > /proc/1/fd/1"]}}}),
        sh(pods, "bad", "sleep 3600",
           lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "echo nope; exit 3"]}}})]})
    wait_for(lambda: "poststart-ran" in pods.cli("logs", "poststart", "-c", "ok", check=False).stdout, 30,
             "the postStart output in the log")
    pod = pods.wait_pod("poststart", lambda p: p["containers"][1]["restartCount"] >= 1, 60,
                        "the failing container to be killed and restarted")
    bad = pod["status"]["containerStatuses"][1]
    last = bad["lastState"].get("terminated") or bad["state"].get("terminated")
    assert "FailedPostStartHook" in last.get("message", "") and "exited with 3" in last["message"]
    assert pod["containers"][0]["restartCount"] == 0


def _cgroup(controller: str, parent: str, container_id: str, name: str) -> str:
    return (Path("/sys/fs/cgroup") / controller / parent.lstrip("/") / container_id / name).read_text().strip()


def test_qos_class_cgroup_parent_and_limits(pods):
    pods.write_pod("guaranteed", {"containers": [sh(pods, "app", "sleep 3600", resources={
        "limits": {"cpu": "200m", "memory": "64Mi"}})]})
    pods.write_pod("burstable", {"containers": [sh(pods, "app", "sleep 3600", resources={
        "requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}})]})
    pods.write_pod("besteffort", {"containers": [sh(pods, "app", "sleep 3600")]})
    g, b, e = (pods.wait_running(n) for n in ("guaranteed", "burstable", "besteffort"))
    assert [p["status"]["qosClass"] for p in (g, b, e)] == ["Guaranteed", "Burstable", "BestEffort"]
    # The runtime's driver, as pod-sync checks it against cgroupDriver (containerd 1.6: its runc options).
    assert pods.runtime(lambda cri: cri.cgroup_driver()) == "cgroupfs"

    gid = g["containers"][0]["containerID"].removeprefix("containerd://")
    parent = f"/kubepods/pod{g['uid']}"
    assert _cgroup("memory", parent, gid, "memory.limit_in_bytes") == str(64 * 2**20)
    # memorySwap NoSwap (the default) on cgroup v1: memory and swap together capped at the limit.
    assert _cgroup("memory", parent, gid, "memory.memsw.limit_in_bytes") == str(64 * 2**20)
    assert _cgroup("cpu", parent, gid, "cpu.cfs_quota_us") == "20000"
    assert _cgroup("cpu", parent, gid, "cpu.cfs_period_us") == "100000"
    assert _cgroup("cpu", parent, gid, "cpu.shares") == str(200 * 1024 // 1000)

    bid = b["containers"][0]["containerID"].removeprefix("containerd://")
    parent = f"/kubepods/burstable/pod{b['uid']}"
    assert _cgroup("cpu", parent, bid, "cpu.shares") == str(100 * 1024 // 1000)
    assert _cgroup("memory", parent, bid, "memory.limit_in_bytes") == str(128 * 2**20)
    assert _cgroup("memory", parent, bid, "memory.memsw.limit_in_bytes") == str(128 * 2**20)
    assert _cgroup("cpu", parent, bid, "cpu.cfs_quota_us") == "-1"

    eid = e["containers"][0]["containerID"].removeprefix("containerd://")
    assert _cgroup("cpu", f"/kubepods/besteffort/pod{e['uid']}", eid, "cpu.shares") == "2"

    # The pods' own cgroups: shares from their requests, limits when every container has one.
    assert _pod_cgroup(g, "cpu", "cpu.cfs_quota_us") == "20000"
    assert _pod_cgroup(g, "memory", "memory.limit_in_bytes") == str(64 * 2**20)
    assert _pod_cgroup(b, "cpu", "cpu.shares") == str(100 * 1024 // 1000)
    assert _pod_cgroup(b, "cpu", "cpu.cfs_quota_us") == "-1"
    assert _pod_cgroup(b, "memory", "memory.limit_in_bytes") == str(128 * 2**20)
    assert _pod_cgroup(e, "cpu", "cpu.shares") == "2"
    # Readable by users other than root, as the kubelet's (0755 directories, whatever pykubelet's
    # umask): a monitoring agent that is not root reads a pod's limits.
    path = Path("/sys/fs/cgroup/cpu") / f"kubepods/burstable/pod{b['uid']}" / "cpu.shares"
    out = subprocess.run(["cat", str(path)], user=65534, group=65534, capture_output=True, text=True, timeout=10)
    assert out.stdout.strip() == str(100 * 1024 // 1000), out.stderr


def _pod_cgroup(pod: dict, controller: str, name: str) -> str:
    tier = {"Guaranteed": "", "Burstable": "burstable/", "BestEffort": "besteffort/"}[pod["status"]["qosClass"]]
    return (Path("/sys/fs/cgroup") / controller / f"kubepods/{tier}pod{pod['uid']}" / name).read_text().strip()


def test_a_burstable_pod_outweighs_a_best_effort_one_for_cpu(pods):
    """The QoS tiers' shares: a BestEffort pod gets what Burstable pods leave. Both spin on the
    same one CPU (taskset), so the rest of the node keeps the other."""
    spin = "taskset -c 1 sh -c 'while :; do :; done'"
    pods.write_pod("burstable-spin", {"terminationGracePeriodSeconds": 0, "containers": [
        sh(pods, "app", spin, resources={"requests": {"cpu": "100m"}})]})
    pods.write_pod("besteffort-spin", {"terminationGracePeriodSeconds": 0, "containers": [sh(pods, "app", spin)]})
    b, e = pods.wait_running("burstable-spin"), pods.wait_running("besteffort-spin")
    tiers = Path("/sys/fs/cgroup/cpu/kubepods")
    assert (tiers / "burstable/cpu.shares").read_text().strip() == str(100 * 1024 // 1000)
    assert (tiers / "besteffort/cpu.shares").read_text().strip() == "2"

    def usage(p: dict) -> int:
        tier = "burstable" if p is b else "besteffort"
        return int((Path("/sys/fs/cgroup/cpuacct/kubepods") / tier / f"pod{p['uid']}" / "cpuacct.usage").read_text())
    before = usage(b), usage(e)
    time.sleep(3)
    got_b, got_e = usage(b) - before[0], usage(e) - before[1]
    assert got_b > 10 * got_e, f"burstable {got_b / 1e9:.2f}s of CPU, best-effort {got_e / 1e9:.2f}s"


def test_pod_level_resources_cap_the_pod_and_its_containers_without_limits(pods):
    pods.write_pod("podlevel", {
        "resources": {"requests": {"cpu": "300m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "96Mi"}},
        "containers": [sh(pods, "free", "sleep 3600"),
                       sh(pods, "capped", "sleep 3600", resources={"limits": {"cpu": "100m", "memory": "32Mi"}})]})
    p = pods.wait_running("podlevel")
    assert p["status"]["qosClass"] == "Burstable"
    assert _pod_cgroup(p, "cpu", "cpu.shares") == str(300 * 1024 // 1000)
    assert _pod_cgroup(p, "cpu", "cpu.cfs_quota_us") == "50000"
    assert _pod_cgroup(p, "memory", "memory.limit_in_bytes") == str(96 * 2**20)
    parent = f"/kubepods/burstable/pod{p['uid']}"
    free, capped = (c["containerID"].removeprefix("containerd://") for c in p["containers"])
    assert _cgroup("cpu", parent, free, "cpu.cfs_quota_us") == "50000", "no limit of its own: the pod's"
    assert _cgroup("memory", parent, free, "memory.limit_in_bytes") == str(96 * 2**20)
    assert _cgroup("cpu", parent, capped, "cpu.cfs_quota_us") == "10000"
    assert _cgroup("memory", parent, capped, "memory.limit_in_bytes") == str(32 * 2**20)


def test_pod_that_does_not_fit_is_rejected(pods):
    pods.write_pod("toobig", {"containers": [sh(pods, "app", "sleep 3600", resources={"requests": {"cpu": "64"}})]})
    pod = pods.wait_pod("toobig", lambda p: p["phase"] == "Failed", 30, "rejection")
    assert pod["status"]["reason"] == "OutOfcpu"
    assert pod["status"]["message"].startswith("Pod was rejected: Node didn't have enough resource: cpu, requested: 64000")
    assert pods.sandboxes_of(pod["uid"]) == []
    # ephemeral-storage against what the node's filesystem has (less the nodefs.available reserve)
    pods.write_pod("toomuchdisk", {"containers": [sh(pods, "app", "sleep 3600",
                                                      resources={"requests": {"ephemeral-storage": "1Pi"}})]})
    pod = pods.wait_pod("toomuchdisk", lambda p: p["phase"] == "Failed", 30, "rejection")
    assert pod["status"]["reason"] == "OutOfephemeral-storage"
    assert pod["status"]["message"].startswith(
        f"Pod was rejected: Node didn't have enough resource: ephemeral-storage, requested: {2**50}, used: ")


def test_env_expansion_field_refs_and_security_context(pods):
    # The references sit in args, handed to the shell as $0..$2 so the shell does not re-read them.
    pods.write_pod("envs", {"containers": [sh(
        pods, "app", 'echo "$0|$1|$2 uid=$(id -u) mem=$MEM host=$HOST_IP"; sleep 3600',
        args=["$(GREETING)", "$$(GREETING)", "$(NOPE)"],
        env=[{"name": "WHO", "value": "world"},
             {"name": "GREETING", "value": "hello-$(WHO)"},
             {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
             {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
        resources={"limits": {"memory": "48Mi"}},
        securityContext={"runAsUser": 1000, "runAsGroup": 1000})]})
    pods.wait_running("envs")
    out = wait_for(lambda: pods.cli("logs", "envs").stdout, 15, "output")
    # $(GREETING) expanded by the kubelet rules, $$ escapes, unknown references stay as written
    assert "hello-world|$(GREETING)|$(NOPE) uid=1000 mem=48 host=" in out
    assert "host=\n" not in out


def test_termination_message_from_file_and_from_logs(pods):
    pods.write_pod("messages", {"restartPolicy": "Never", "containers": [
        sh(pods, "file", "echo 'all done, 42 items' > /dev/termination-log; exit 1"),
        sh(pods, "fallback", "echo 'disk on fire'; exit 1", terminationMessagePolicy="FallbackToLogsOnError")]})
    pod = pods.wait_pod("messages", lambda p: p["phase"] == "Failed", 30, "both containers to fail")
    by_name = {c["name"]: c["state"]["terminated"] for c in pod["status"]["containerStatuses"]}
    assert by_name["file"]["message"].strip() == "all done, 42 items"
    assert by_name["fallback"]["message"].strip() == "disk on fire"


def test_container_logs_are_rotated(pods):
    pods.write_pod("chatty", {"containers": [sh(
        pods, "app", "i=0; while true; do i=$((i+1)); echo \"line $i $(printf '%0100d' 0)\"; sleep 0.005; done")]})
    pod = pods.wait_running("chatty")
    log_dir = next((pods.root / "pod-logs").glob(f"default_chatty-*_{pod['uid']}")) / "app"
    wait_for(lambda: any(p.name.endswith(".gz") for p in log_dir.iterdir()), 60,
             "a rotated and compressed log file")
    files = list(log_dir.iterdir())
    assert len(files) <= LOG_MAX_FILES + 1, [f.name for f in files]  # +1: a rotation may be under way
    assert (log_dir / "0.log").exists()
    assert (log_dir / "0.log").stat().st_size < LOG_MAX_SIZE * 20
    assert pods.cli("logs", "chatty", "--tail", "1").stdout.startswith("line ")
    # In the node's podLogsDir (--pod-logs-dir), not the kubelet's default /var/log/pods.
    assert not list(Path("/var/log/pods").glob(f"*_{pod['uid']}"))
    # Looked at every containerLogMonitorInterval (3 s here; the kubelet's default is 10 s): the
    # rotated files' time stamps (UTC, to the second) are that far apart.
    stamps: set[datetime] = set()

    def three_stamps() -> bool:
        stamps.update(datetime.strptime(p.name.split(".")[2], "%Y%m%d-%H%M%S")
                      for p in log_dir.glob("0.log.*") if not p.name.endswith(".tmp"))
        return len(stamps) >= 3
    wait_for(three_stamps, LOG_MONITOR_EVERY * 4 + 10, "three rotations", interval=0.2)
    ordered = sorted(stamps)
    gaps = [(b - a).total_seconds() for a, b in pairwise(ordered)]
    assert all(LOG_MONITOR_EVERY - 1 <= g <= LOG_MONITOR_EVERY * 2 + 1 for g in gaps), gaps


def test_logs_are_compressed_one_container_at_a_time(pods):
    """containerLogMaxWorkers' default, 1: three containers' logs need rotating at the same
    monitor pass, and their compressions (each file's birth to last write) never overlap."""
    pods.write_pod("bursts", two_bursts(pods.image("busybox"), 3, LOG_MONITOR_EVERY + 2))
    spans = compression_spans(pods, "bursts", 3, LOG_MONITOR_EVERY * 4 + 30)
    assert most_at_once(spans) == 1, f"compressions under way at once: {sorted(spans)}"


def test_dead_sandbox_is_recreated_with_all_containers(pods):
    import os
    import signal

    pods.write_pod("phoenix", {"containers": [sh(pods, "app", "sleep 3600")]})
    pod = pods.wait_running("phoenix")
    [sandbox] = pods.sandboxes_of(pod["uid"])
    os.kill(pods.runtime_pid("sandbox", sandbox.id), signal.SIGKILL)
    again = pods.wait_pod("phoenix", lambda p: p["containers"][0]["restartCount"] == 1
                          and p["containers"][0]["state"] == "running" and p["podIP"], 60,
                          "a new sandbox with the container restarted")
    ready = [s for s in pods.sandboxes_of(pod["uid"]) if s.state == 0]
    assert len(ready) == 1 and ready[0].id != sandbox.id and ready[0].metadata.attempt == 1
    assert again["uid"] == pod["uid"]


def test_oom_score_adj_and_read_only_root(pods):
    pods.write_pod("hardened", {"containers": [sh(
        pods, "app", "touch /probe-file 2>&1 || echo read-only-ok; sleep 3600",
        securityContext={"readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}})]})
    pod = pods.wait_running("hardened")
    wait_for(lambda: "read-only-ok" in pods.cli("logs", "hardened").stdout, 15, "the write to fail")
    cid = pod["containers"][0]["containerID"].removeprefix("containerd://")
    pid = pods.runtime_pid("container", cid)
    assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "1000"  # BestEffort
    cap_eff = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("CapEff"))
    assert int(cap_eff.split()[1], 16) == 0
