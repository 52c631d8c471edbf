"""Settings of this package's node (tests/cpu_manager/conftest.py) observed on it: service logs
as JSON (logging.format), the kubelet API without its debugging handlers
(enableDebuggingHandlers false), a manifest no directory event announces found within
fileCheckFrequency, every running pod synced every syncFrequency, and a runtime that stops
answering failing the node's calls after runtimeRequestTimeout, image pulls two at a time,
log compressions three at a time, the pods' cgroups below cgroupRoot, and the node's processes
at oomScoreAdj and maxOpenFiles, evictionHard merged with the defaults, and the node's spans at the
tracing endpoint, the node's own processes in kubeletCgroups, and pods' bridge ports without
hairpin (hairpinMode none)."""

from __future__ import annotations

import json
import os
import signal
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from shared.process.admin import SERVICES
from tests.cpu_manager.conftest import (
    CGROUP_ROOT,
    FILE_CHECK_EVERY,
    HARD_MEMORY_MI,
    KUBELET_CGROUPS,
    LOG_WORKERS,
    MAX_OPEN_FILES,
    OOM_SCORE_ADJ,
    PARALLEL_PULLS,
    RUNTIME_TIMEOUT,
    SYNC_EVERY,
    SettingsNode,
)
from tests.integration.conftest import LOG_MONITOR_EVERY, wait_for
from tests.integration.log_compression import compression_spans, two_bursts
from tests.integration.node_limits import node_process_limits
from tests.integration.pod_network import hairpin_mode
from tests.integration.slow_registry import most_at_once, pull_spans


def sleeper(node, name: str, **labels) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"terminationGracePeriodSeconds": 2, "containers": [
                {"name": "app", "image": node.image("busybox"), "command": ["sleep", "3600"]}]}}


def test_every_service_logs_json_lines(settings_node: SettingsNode):
    """logging.format json: each line of each service's log is one JSON object naming the
    service, with the kubelet's keys."""
    logs = settings_node.node.root / "logs"
    for service in SERVICES:
        lines = (logs / f"{service}.log").read_text().splitlines()
        assert lines, f"{service} logged nothing"
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                raise AssertionError(f"{service}.log has a line that is not JSON: {line[:300]}") from None
            assert record["service"] == service and {"ts", "caller", "msg", "logger"} <= record.keys(), record
            assert "v" in record or "level" in record, record  # klog's verbosity, or a warning's level
    # What a service logs before it has read its configuration is in JSON too (these flags are
    # deprecated in the kubelet, which warns about them as each service starts).
    assert "Flag --pod-manifest-path has been deprecated" in (logs / "pod-sync.log").read_text()


def test_every_process_of_the_node_runs_at_oom_score_adj_and_max_open_files(settings_node: SettingsNode):
    limits = node_process_limits(settings_node.node.root / "run")
    want = (OOM_SCORE_ADJ, f"{MAX_OPEN_FILES}/{MAX_OPEN_FILES}")
    assert limits == {name: want for name in limits}, limits


def test_the_nodes_own_processes_run_in_kubelet_cgroups(settings_node: SettingsNode):
    """kubeletCgroups: the supervisor, the bus and every service in it, in each hierarchy where
    usage is accounted (cpu, cpuacct, memory, pids), the runtime not; the Summary's "kubelet"
    system container is that cgroup, with its usage."""
    run = settings_node.node.root / "run"
    for name in ["supervisor", "nats", *SERVICES]:
        pid = int((run / f"{name}.pid").read_text())
        groups = {c: path for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                  for _, controllers, path in [line.split(":", 2)] for c in controllers.split(",")}
        for controller in ("cpu", "cpuacct", "memory", "pids"):
            assert groups.get(controller) == KUBELET_CGROUPS, (name, controller, groups)
    containerd = int((run / "containerd.pid").read_text())
    assert KUBELET_CGROUPS not in Path(f"/proc/{containerd}/cgroup").read_text(), "the runtime stays in its own"
    procs = Path("/sys/fs/cgroup/memory") / KUBELET_CGROUPS.strip("/") / "cgroup.procs"
    assert len(procs.read_text().split()) >= 2 + len(SERVICES), procs.read_text()
    summary = kubelet_json(settings_node, "/stats/summary")
    kubelet = next(c for c in summary["node"]["systemContainers"] if c["name"] == "kubelet")
    assert kubelet["memory"]["workingSetBytes"] > 20 * 2**20, kubelet  # nine processes' memory


def test_eviction_hard_keeps_the_default_thresholds_of_the_signals_it_does_not_name(settings_node: SettingsNode):
    """evictionHard names memory.available alone; mergeDefaultEvictionSettings true: the eviction
    service watches the kubelet's default thresholds of the disk signals too."""
    def hard() -> dict[str, str]:
        signals = settings_node.node.admin_get("eviction", "/signals", timeout=10).json()
        return {s["signal"]: s["hard"]["threshold"] for s in signals if "hard" in s}
    want = {"memory.available": f"{HARD_MEMORY_MI}Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
            "imagefs.available": "15%", "imagefs.inodesFree": "5%"}
    seen = wait_for(lambda: (h := hard()).keys() >= want.keys() and h, 60, "every signal observed")
    assert {k: seen[k] for k in want} == want, seen


def kubelet_api(sn: SettingsNode, method: str, path: str) -> int:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # the node's self-signed certificate
    ctx.load_cert_chain(str(sn.client.cert), str(sn.client.key))
    req = urllib.request.Request(f"https://127.0.0.1:{sn.node.kubelet_port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def kubelet_json(sn: SettingsNode, path: str) -> dict:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # the node's self-signed certificate
    ctx.load_cert_chain(str(sn.client.cert), str(sn.client.key))
    with urllib.request.urlopen(f"https://127.0.0.1:{sn.node.kubelet_port}{path}", context=ctx, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_pods_cgroups_are_below_cgroup_root(settings_node: SettingsNode, pods):
    """cgroupRoot /pykubelet-test-settings: the pods' cgroup, its QoS tiers and each pod's cgroup
    are below it, with the pod's settings (cpuCFSQuota false: a CPU limit gives neither the pod
    nor the container a CFS quota); nothing of this node's is under /kubepods; the node's stats
    find them there; a pod's cgroup goes with it."""
    cgroups = Path("/sys/fs/cgroup")
    kubepods = CGROUP_ROOT.strip("/") + "/kubepods"
    manifest = pods.write_pod("rooted", {"terminationGracePeriodSeconds": 1, "containers": [
        {"name": "app", "image": pods.image("busybox"), "command": ["sleep", "3600"],
         "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}}}]})
    pod = pods.wait_running("rooted")
    uid = pod["uid"]
    cid = pod["containers"][0]["containerID"].removeprefix("containerd://")
    pod_dir = cgroups / "cpu" / kubepods / "burstable" / f"pod{uid}"
    assert (pod_dir / "cpu.shares").read_text().strip() == "102", "100m as the pod's cpu.shares"
    assert (pod_dir / cid / "cgroup.procs").read_text().split(), "the container runs in its cgroup below the pod's"
    assert (pod_dir / "cpu.cfs_quota_us").read_text().strip() == "-1", "no quota for the pod (cpuCFSQuota false)"
    assert (pod_dir / cid / "cpu.cfs_quota_us").read_text().strip() == "-1", "nor for its container"
    assert (cgroups / "pids" / kubepods / "burstable" / f"pod{uid}" / "pids.max").is_file()
    assert (cgroups / "cpu" / kubepods / "besteffort" / "cpu.shares").read_text().strip() == "2"
    # enforceNodeAllocatable pods (the default) caps the pods' cgroup where it is.
    assert int((cgroups / "memory" / kubepods / "memory.limit_in_bytes").read_text()) < 2**62
    assert not (cgroups / "cpu" / "kubepods" / "burstable" / f"pod{uid}").exists()

    summary = kubelet_json(settings_node, "/stats/summary")
    stats = next(p for p in summary["pods"] if p["podRef"]["uid"] == uid)
    assert stats["cpu"]["usageCoreNanoSeconds"] > 0 and stats["memory"]["workingSetBytes"] > 0, stats
    system = {c["name"]: c for c in summary["node"]["systemContainers"]}
    assert system["pods"]["memory"]["workingSetBytes"] > 0, system

    manifest.unlink()
    wait_for(lambda: not pod_dir.exists(), 60, "the pod's cgroup removed with it")


def test_the_kubelet_api_has_no_debugging_handlers(settings_node: SettingsNode, pods):
    """enableDebuggingHandlers false: logs, exec, attach, port-forward, run, the runtime's pods,
    profiling and the node's logs answer the kubelet's 405 "Debug endpoints are disabled."; the
    pod list, stats and metrics are served."""
    pods.write_pod("quiet", sleeper(pods, "quiet")["spec"])
    pods.wait_running("quiet")
    pod = f"quiet-{pods.node_name}"
    assert kubelet_api(settings_node, "GET", "/pods") == 200
    assert kubelet_api(settings_node, "GET", "/stats/summary") == 200
    for method, path in (("GET", f"/containerLogs/default/{pod}/app"), ("POST", f"/exec/default/{pod}/app?command=true"),
                         ("POST", f"/attach/default/{pod}/app"), ("POST", f"/portForward/default/{pod}"),
                         ("POST", f"/run/default/{pod}/app?cmd=true"), ("GET", "/runningpods/"),
                         ("GET", "/debug/pprof/"), ("GET", "/logs/")):
        assert kubelet_api(settings_node, method, path) == 405, f"{method} {path}"
    assert kubelet_api(settings_node, "PUT", "/debug/flags/v") == 404, "no debug flags without debugging handlers"


def test_hairpin_mode_none_leaves_the_pods_bridge_port_without_hairpin(pods):
    """hairpinMode none: the pod's veth port on the bridge is not in hairpin mode (the default
    node's is: tests/integration/test_static_pods.py)."""
    pods.write_pod("no-hairpin", sleeper(pods, "no-hairpin")["spec"])
    uid = pods.wait_running("no-hairpin")["uid"]
    assert hairpin_mode(pods, uid, "app") == "0"


def test_pod_syncs_and_runtime_calls_are_traced_to_the_tracing_endpoint(settings_node: SettingsNode, pods):
    """tracing (every trace sampled, an OTLP receiver on a unix socket): a pod's first sync is a
    `syncPod` span with the kubelet's attributes, the runtime calls it made (RunPodSandbox,
    CreateContainer, StartContainer) its client spans, named as the kubelet's otelgrpc names them,
    in the same trace; its removal a `syncTerminatingPod` span over StopPodSandbox. Every span's
    resource says `kubelet` on this node, as a trace backend shows the kubelet's."""
    traces = settings_node.traces
    pods.write_pod("traced", sleeper(pods, "traced")["spec"])
    uid = pods.wait_running("traced")["uid"]

    def spans(name: str, **attributes) -> list:
        return [s for s in traces.received() if s.name == name
                and all(s.attributes.get(k) == v for k, v in attributes.items())]

    def children(parent, name: str) -> list:
        return [s for s in traces.received() if s.name == name and s.parent_span_id == parent.span_id]

    def first_sync():
        for sync in spans("syncPod", **{"k8s.pod.uid": uid, "k8s.pod.update_type": "create"}):
            if children(sync, "runtime.v1.RuntimeService/RunPodSandbox"):
                return sync
        return None
    sync = wait_for(first_sync, 30, "the pod's first syncPod span with its RunPodSandbox call")
    name = f"traced-{pods.node_name}"
    assert sync.attributes == {"k8s.pod.uid": uid, "k8s.pod.update_type": "create", "k8s.pod": f"default/{name}",
                               "k8s.pod.name": name, "k8s.namespace.name": "default"}, sync.attributes
    assert sync.resource["service.name"] == "kubelet" and sync.resource["host.name"] == pods.node_name, sync.resource
    assert sync.resource["pykubelet.service"] == "pod-sync"
    [run] = children(sync, "runtime.v1.RuntimeService/RunPodSandbox")
    assert run.trace_id == sync.trace_id and run.kind == 3, run  # SPAN_KIND_CLIENT
    assert run.attributes == {"rpc.system": "grpc", "rpc.service": "runtime.v1.RuntimeService",
                              "rpc.method": "RunPodSandbox", "rpc.grpc.status_code": 0}, run.attributes
    for call in ("CreateContainer", "StartContainer"):
        assert children(sync, f"runtime.v1.RuntimeService/{call}"), f"{call} within the pod's first sync"

    pods.remove("traced.yaml")
    wait_for(lambda: any(children(s, "runtime.v1.RuntimeService/StopPodSandbox") for s in
                         spans("syncTerminatingPod", **{"k8s.pod.uid": uid})),
             60, "the pod's syncTerminatingPod span with its StopPodSandbox call")


def test_a_manifest_no_directory_event_announces_is_found_within_file_check_frequency(pods, tmp_path):
    """The manifest is a symlink to a file outside the directory: the directory's watch sees the
    link made, not the file it points at being replaced. The rescan every fileCheckFrequency
    finds the change (the pod's new label makes it a new static pod)."""
    target = tmp_path / "linked.yaml"
    target.write_text(yaml.safe_dump(sleeper(pods, "linked", version="1")))
    link = pods.manifests / "linked.yaml"
    link.symlink_to(target)
    pods.written.append(link)
    first = pods.wait_running("linked")
    tmp = tmp_path / "linked.yaml.new"
    tmp.write_text(yaml.safe_dump(sleeper(pods, "linked", version="2")))
    tmp.rename(target)  # the link's directory sees no event
    changed = time.monotonic()
    second = pods.wait_pod("linked", lambda p: p["uid"] != first["uid"], FILE_CHECK_EVERY * 5 + 10,
                           "the pod of the changed manifest")
    found = time.monotonic() - changed
    assert found < FILE_CHECK_EVERY * 5 + 10, found
    assert second["uid"] != first["uid"]


def pod_syncs(node) -> dict[str, float]:
    """kubelet_pod_worker_duration_seconds_count by operation_type, from pod-sync's metrics."""
    text = node.admin_get("pod-sync", "/metrics").text
    return {s.labels["operation_type"]: s.value for f in text_string_to_metric_families(text)
            if f.name == "kubelet_pod_worker_duration_seconds"
            for s in f.samples if s.name.endswith("_count")}


def test_running_pods_are_synced_every_sync_frequency(pods):
    """syncFrequency 3 s: with one pod running and nothing changing, its periodic syncs
    (operation_type "sync", as the kubelet counts them) come that often."""
    pods.write_pod("steady", sleeper(pods, "steady")["spec"])
    pods.wait_running("steady")
    creates = pod_syncs(pods).get("create", 0)
    assert creates >= 1
    before, start = pod_syncs(pods).get("sync", 0), time.monotonic()
    time.sleep(SYNC_EVERY * 3 + 1)
    syncs = pod_syncs(pods).get("sync", 0) - before
    took = time.monotonic() - start
    # At least one sync per period for the one pod (more pods may have been running).
    assert syncs >= int(took // SYNC_EVERY) - 1 >= 2, (syncs, took)


def runtime_errors(node, operation: str) -> float:
    """kubelet_runtime_operations_errors_total of one operation, from pod-sync's metrics."""
    text = node.admin_get("pod-sync", "/metrics").text
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == "kubelet_runtime_operations_errors"
               for s in f.samples if s.name.endswith("_total") and s.labels.get("operation_type") == operation)


def test_calls_to_a_runtime_that_stops_answering_fail_after_runtime_request_timeout(pods):
    """runtimeRequestTimeout 10 s: containerd stopped (SIGSTOP) answers nothing; pod-sync's
    relist (ListContainers, every second) fails once that long has passed, not sooner and not
    after the kubelet's 2 minutes. Containers run on meanwhile, and the node works again once
    containerd does."""
    pods.write_pod("bystander", sleeper(pods, "bystander")["spec"])
    before = pods.wait_running("bystander")
    pid = int((pods.root / "run" / "containerd.pid").read_text())
    errors = runtime_errors(pods, "list_containers")
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        failed_at = wait_for(lambda: runtime_errors(pods, "list_containers") > errors and time.monotonic(),
                             RUNTIME_TIMEOUT + 20, "a ListContainers call to fail", interval=0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    waited = failed_at - stopped
    assert RUNTIME_TIMEOUT - 1 <= waited <= RUNTIME_TIMEOUT + 20, f"the first call failed {waited:.1f}s after the stop"
    after = pods.wait_running("bystander")
    assert after["uid"] == before["uid"] and after["containers"][0]["restartCount"] == 0, after


def test_images_are_pulled_at_most_max_parallel_image_pulls_at_once(pods):
    """serializeImagePulls false, maxParallelImagePulls 2: three pods of three new images,
    written at once; their pulls, each slowed down by the registry, run two at a time."""
    spans = pull_spans(pods, "parallel", PARALLEL_PULLS + 1)
    assert most_at_once(spans) == PARALLEL_PULLS, f"pulls under way at once: {spans}"


def test_logs_are_compressed_up_to_container_log_max_workers_at_once(pods):
    """containerLogMaxWorkers 3: three containers' logs need rotating at the same monitor pass,
    and their compressions (each file's birth to last write) overlap, where the default of one
    worker (tests/integration/test_lifecycle.py) does one at a time."""
    pods.write_pod("bursts", two_bursts(pods.image("busybox"), LOG_WORKERS, LOG_MONITOR_EVERY + 2))
    spans = compression_spans(pods, "bursts", LOG_WORKERS, LOG_MONITOR_EVERY * 4 + 30)
    assert most_at_once(spans) >= 2, f"compressions under way at once: {sorted(spans)}"
