from services.status_reporter.pod_status import compute_status
from shared.model.podspec import validate_pod


def pod(restart="Always", init=None, names=("app",)):
    return validate_pod({"metadata": {"name": "p", "uid": "u"}, "spec": {
        "restartPolicy": restart, "initContainers": init or [],
        "containers": [{"name": n, "image": "i:1"} for n in names]}})


def running(name, restarts=0, last=None):
    return {"name": name, "state": "running", "started_at": "2026-01-01T00:00:00Z",
            "restart_count": restarts, "container_id": "containerd://abc", "image": "i:1",
            "image_id": "sha256:1", "last_terminated": last, "waiting_reason": ""}


def exited(name, code, waiting=""):
    return {"name": name, "state": "exited", "exit_code": code, "reason": "Error" if code else "Completed",
            "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:05Z",
            "restart_count": 0, "container_id": "containerd://abc", "waiting_reason": waiting,
            "waiting_message": "back-off 10s" if waiting else "", "last_terminated": None}


def rt(*containers, ip="10.88.0.5", **extra):
    return {"sandbox_ready": True, "pod_ip": ip, "containers": list(containers), **extra}


def cond(status, ctype):
    return next(c for c in status["conditions"] if c["type"] == ctype)["status"]


def test_running_pod():
    status, why = compute_status(pod(), rt(running("app")), None)
    assert status["phase"] == "Running"
    assert status["podIP"] == "10.88.0.5" and status["podIPs"] == [{"ip": "10.88.0.5"}]
    [cs] = status["containerStatuses"]
    assert cs["state"] == {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    assert cs["ready"] and cs["started"] and cs["containerID"] == "containerd://abc"
    assert cond(status, "Ready") == "True" and cond(status, "PodReadyToStartContainers") == "True"
    assert why == ""


def test_nothing_observed_yet_is_pending_container_creating():
    status, why = compute_status(pod(), None, None)
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert why == "waiting for pod-sync to start the pod"


def test_crash_loop_shows_waiting_and_last_state():
    status, why = compute_status(pod(), rt(exited("app", 2, waiting="CrashLoopBackOff")), None)
    [cs] = status["containerStatuses"]
    assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert cs["lastState"]["terminated"]["exitCode"] == 2
    assert status["phase"] == "Running"  # restartPolicy Always: the kubelet says Running
    assert "container app: container keeps crashing" in why


def test_phases_for_finished_pods():
    assert compute_status(pod("Never"), rt(exited("app", 1)), None)[0]["phase"] == "Failed"
    assert compute_status(pod("Never"), rt(exited("app", 0)), None)[0]["phase"] == "Succeeded"
    assert compute_status(pod("OnFailure"), rt(exited("app", 0)), None)[0]["phase"] == "Succeeded"
    status, why = compute_status(pod("Never"), rt(exited("app", 1)), None)
    assert "container app exited with code 1 (Error)" in why


def test_terminal_phase_is_sticky():
    status, _ = compute_status(pod("Never"), rt(running("app")), {"phase": "Failed"})
    assert status["phase"] == "Failed"


def test_image_error_explained():
    obs = {"name": "app", "state": "", "waiting_reason": "ErrImagePull",
           "waiting_message": 'Failed to pull image "x": not found'}
    status, why = compute_status(pod(), rt(obs), None)
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    assert why == 'container app: image could not be pulled: Failed to pull image "x": not found'


def test_sandbox_error_explained():
    status, why = compute_status(pod(), rt(sync_error_reason="FailedCreatePodSandBox",
                                           sync_error_message="Failed to create pod sandbox: boom"), None)
    assert why == "sandbox failed: Failed to create pod sandbox: boom"


def test_init_containers_gate_phase_and_conditions():
    p = pod(init=[{"name": "init", "image": "i:1"}])
    status, _ = compute_status(p, rt(running("init")), None)
    assert status["phase"] == "Pending"
    assert cond(status, "Initialized") == "False"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    assert not status["initContainerStatuses"][0]["ready"]
    status, _ = compute_status(p, rt(exited("init", 0), running("app")), None)
    assert status["phase"] == "Running" and cond(status, "Initialized") == "True"
    assert status["initContainerStatuses"][0]["ready"], "an init container that exited 0 is ready"


def test_failed_first_init_container_of_a_never_restarting_pod_as_the_kubelet_reports_it():
    # e2e "InitContainer should not start app containers and fail the pod if init containers fail
    # on a RestartNever pod": statuses in spec order, the ones never created waiting
    # PodInitializing with their spec image.
    p = validate_pod({"metadata": {"name": "p", "uid": "u"}, "spec": {
        "restartPolicy": "Never",
        "initContainers": [{"name": "init1", "image": "busybox:1.29"}, {"name": "init2", "image": "busybox:1.29"}],
        "containers": [{"name": "run1", "image": "pause:3.2"}]}})
    status, _ = compute_status(p, rt(exited("init1", 1)), None)
    assert status["phase"] == "Failed"
    init1, init2 = status["initContainerStatuses"]
    assert (init1["name"], init2["name"]) == ("init1", "init2")
    assert init1["state"]["terminated"]["exitCode"] == 1
    assert init2["state"] == {"waiting": {"reason": "PodInitializing"}} and init2["image"] == "busybox:1.29"
    [run1] = status["containerStatuses"]
    assert run1["state"] == {"waiting": {"reason": "PodInitializing"}} and run1["image"] == "pause:3.2"


def test_transition_time_kept_while_status_unchanged():
    first, _ = compute_status(pod(), rt(running("app")), None)
    ready = next(c for c in first["conditions"] if c["type"] == "Ready")
    ready["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    second, _ = compute_status(pod(), rt(running("app")), first)
    assert next(c for c in second["conditions"] if c["type"] == "Ready")["lastTransitionTime"] == "2020-01-01T00:00:00Z"


def test_rejected_pod_is_failed_with_reason():
    status, why = compute_status(pod(), None, None, rejection=("OutOfcpu", "Pod was rejected: cpu"))
    assert status["phase"] == "Failed" and status["reason"] == "OutOfcpu"
    assert status["podIP"] is None and why.startswith("rejected (OutOfcpu)")


def test_an_evicted_pod_is_not_failed_until_its_containers_have_stopped():
    """As the kubelet's status manager: while a container may still run (stopping within the
    grace period it was given), the pod keeps its phase and shows only the DisruptionTarget
    condition; once every container has exited it is Failed with the reason."""
    evicted = ("Evicted", "The node was low on resource: pids. ")
    stopping, why = compute_status(pod(), rt(running("app")), None, rejection=evicted)
    assert stopping["phase"] == "Running" and "reason" not in stopping, stopping
    assert cond(stopping, "DisruptionTarget") == "True"
    assert why == "stopping (Evicted): The node was low on resource: pids."
    unknown = {**running("app"), "state": "unknown"}
    unsure = compute_status(pod(), rt(unknown), stopping, rejection=evicted)[0]
    assert unsure["phase"] not in ("Failed", "Succeeded") and "reason" not in unsure, unsure
    gone, why = compute_status(pod(), rt(exited("app", 137), ip=""), stopping, rejection=evicted)
    assert (gone["phase"], gone["reason"], gone["message"]) == ("Failed", *evicted)
    assert cond(gone, "DisruptionTarget") == "True" and cond(gone, "Ready") == "False"
    assert why.startswith("Evicted: ")


def test_one_broken_pod_does_not_stop_the_others(tmp_path):
    from services.status_reporter.reporter import PodStatusReporter
    from shared.store import DesiredPod, PodStatusRecord, Store

    ps = Store(tmp_path / "s.db", writer="pod-sync")
    ps.create_schema()
    good = pod().to_manifest()
    with ps.session() as s:
        s.add(DesiredPod(uid="bad", namespace="default", name="bad", source="file", manifest={"spec": 1}))
        s.add(DesiredPod(uid="good", namespace="default", name="good", source="file", manifest=good))
    reporter = PodStatusReporter(Store(tmp_path / "s.db", writer="status-reporter"), bus=None)
    assert reporter.refresh() == ["good"]
    with ps.session() as s:
        assert [r.uid for r in s.query(PodStatusRecord)] == ["good"]


def test_the_parsed_pods_of_removed_pods_are_not_kept(tmp_path):
    """Pods parsed for their status are cached by UID; a removed pod's entry goes with it (in a
    churn of thousands of pods the cache grew by ~40 KiB a pod until its limit)."""
    from sqlalchemy import delete

    from services.status_reporter.reporter import PodStatusReporter
    from shared.store import DesiredPod, Store

    ps = Store(tmp_path / "s.db", writer="pod-sync")
    ps.create_schema()
    with ps.session() as s:
        for uid in ("a", "b", "c"):
            s.add(DesiredPod(uid=uid, namespace="default", name=uid, source="file", manifest=pod().to_manifest()))
    reporter = PodStatusReporter(Store(tmp_path / "s.db", writer="status-reporter"), bus=None)
    reporter.refresh()
    assert len(reporter._pods) == 3
    with ps.session() as s:
        s.execute(delete(DesiredPod).where(DesiredPod.uid == "b"))
    reporter.refresh(["b"])  # the event naming the removed pod
    assert "b" not in reporter._pods and "a" in reporter._pods
    with ps.session() as s:
        s.execute(delete(DesiredPod).where(DesiredPod.uid == "c"))
    reporter.refresh()  # the periodic pass, for a lost event
    assert "c" not in reporter._pods and len(reporter._pods) == 1
