"""Graceful node shutdown: the configuration as the kubelet reads it, eviction's manager against
a fake logind and a real store, pod-sync stopping the pods and refusing new ones, and the Node and
pod status status-reporter makes of it. The real logind and `systemctl poweroff` are in
tests/vm/test_production_host.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cri_api.v1 import api_pb2 as cri

from services.cli.status_cmd import render_pressure
from services.eviction.fake_logind import FakeLogind
from services.eviction.logind import LogindError, logind_pid
from services.eviction.node_shutdown import END_TIME, START_TIME, Group, NodeShutdownManager, group_of, shutdown_groups
from services.status_reporter.mirror_pods import _left_terminal
from services.status_reporter.node_agent import NodeAgent
from services.status_reporter.pod_status import compute_status
from shared.bus.messages import EvictionsDecided, KubeEvent, NodeShutdownChanged
from shared.config.settings import ConfigError, KubeletConfiguration, load_kubelet_config
from shared.host.checks import startup_problems
from shared.host.facts import boot_id
from shared.model.qos import SYSTEM_CRITICAL_PRIORITY
from shared.store import DesiredPod, NodeHealth, NodeShutdown, PodEviction, PodRuntime, Store
from shared.store.node_shutdown import NOT_READY, TERMINATED, TERMINATED_MESSAGE, shutting_down
from shared.store.pressure_report import pressure_report
from tests.unit.test_syncer import manifest, observed, want

CRITICAL = SYSTEM_CRITICAL_PRIORITY


# -- configuration -----------------------------------------------------------------------------


def test_shutdown_grace_period_is_two_priority_groups_as_the_kubelet_reads_it():
    k, _ = load_kubelet_config({"shutdownGracePeriod": "30s", "shutdownGracePeriodCriticalPods": "10s"})
    groups = shutdown_groups(k)
    assert groups == [Group(0, 20), Group(CRITICAL, 10)]
    assert group_of(-5, groups) == Group(0, 20)  # below every group: the lowest
    assert group_of(CRITICAL - 1, groups) == Group(0, 20)
    assert group_of(CRITICAL + 1000, groups) == Group(CRITICAL, 10)
    assert shutdown_groups(KubeletConfiguration()) == [], "0s (the default) turns it off"
    k, _ = load_kubelet_config({"shutdownGracePeriodByPodPriority": [
        {"priority": 100000, "shutdownGracePeriodSeconds": 5}, {"priority": 0, "shutdownGracePeriodSeconds": 20}]})
    assert shutdown_groups(k) == [Group(0, 20), Group(100000, 5)]


@pytest.mark.parametrize("data, needle", [
    ({"shutdownGracePeriod": "10s", "shutdownGracePeriodCriticalPods": "20s"},
     "shutdownGracePeriodCriticalPods 20s must be >= 0 and <= shutdownGracePeriod"),
    ({"shutdownGracePeriod": "10s", "shutdownGracePeriodByPodPriority": [{"priority": 1}]},
     "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod"),
    ({"shutdownGracePeriodByPodPriority": [{"priority": 1}, {"priority": 1}]}, "each priority may be given once"),
    ({"shutdownGracePeriodByPodPriority": [{"priority": 1, "shutdownGracePeriodSeconds": -1}]},
     "shutdownGracePeriodSeconds"),
    ({"shutdownGracePeriod": "soon"}, "shutdownGracePeriod"),
])
def test_a_bad_shutdown_configuration_names_the_field(data, needle):
    with pytest.raises(ConfigError, match=needle):
        load_kubelet_config(data)


def test_a_host_without_systemd_refuses_a_shutdown_grace_period(tmp_path):
    k, _ = load_kubelet_config({"shutdownGracePeriod": "30s"})
    problems = startup_problems(k, cgroup_root=tmp_path, run=tmp_path, cpus=frozenset({0}), numa=frozenset({0}),
                                memory_bytes=2**30, proc=tmp_path)
    assert any(p.startswith("shutdownGracePeriod: a graceful node shutdown is announced by systemd-logind")
               for p in problems), problems
    (tmp_path / "systemd" / "system").mkdir(parents=True)
    assert not [p for p in startup_problems(k, cgroup_root=tmp_path, run=tmp_path, cpus=frozenset({0}),
                                            numa=frozenset({0}), memory_bytes=2**30, proc=tmp_path)
                if "shutdown" in p]


# -- eviction's manager ------------------------------------------------------------------------


class RecordingBus:
    def __init__(self) -> None:
        self.published: list = []

    async def publish(self, event) -> None:
        self.published.append(event)


class Node:
    """The store as the services write it, and pod-sync's part played by the test: pods stop
    (their runtime row says so) `stop_after` seconds after their decision, unless told never to."""

    def __init__(self, path: Path) -> None:
        self.pod_sync = Store(path, writer="pod-sync")
        self.pod_sync.create_schema()
        self.eviction = Store(path, writer="eviction")

    def run_pod(self, name: str, priority: int | None = None, grace: int = 30, source: str = "api") -> str:
        spec: dict = {"terminationGracePeriodSeconds": grace, "containers": [{"name": "c", "image": "i:1"}]}
        if priority is not None:
            spec["priority"] = priority
        uid = f"uid-{name}"
        with self.pod_sync.session() as s:
            s.add(DesiredPod(uid=uid, namespace="default", name=name, source=source, admitted=True,
                             manifest={"metadata": {"name": name, "namespace": "default", "uid": uid}, "spec": spec}))
            s.add(PodRuntime(uid=uid, sandbox_ready=True, containers=[{"name": "c", "state": "running"}]))
        return uid

    def stop(self, uid: str) -> None:
        with self.pod_sync.session() as s:
            row = s.get(PodRuntime, uid)
            row.sandbox_ready, row.containers = False, [{"name": "c", "state": "exited"}]

    def decisions(self) -> dict[str, PodEviction]:
        with self.eviction.session() as s:
            return {d.uid: d for d in s.query(PodEviction)}

    def shutdown_row(self) -> NodeShutdown | None:
        with self.eviction.session() as s:
            return s.get(NodeShutdown, 1)


@pytest.fixture
def services(tmp_path):
    n = Node(tmp_path / "state.db")
    yield n
    n.pod_sync.close()
    n.eviction.close()


def manager(node: Node, logind: FakeLogind, bus: RecordingBus, groups: list[Group], tmp_path: Path,
            this_boot: str = "boot-1") -> NodeShutdownManager:
    return NodeShutdownManager(node.eviction, bus, logind, groups, this_boot,
                               dropin=tmp_path / "logind.conf.d" / "99-pykubelet.conf", poll=0.02)


async def test_start_raises_loginds_inhibit_delay_to_the_grace_period_and_takes_a_delay_lock(services, tmp_path):
    logind = FakeLogind(inhibit_delay=5, conf_dir=tmp_path / "logind.conf.d")
    m = manager(services, logind, RecordingBus(), [Group(0, 20), Group(CRITICAL, 10)], tmp_path)
    await m.start()
    dropin = (tmp_path / "logind.conf.d" / "99-pykubelet.conf").read_text()
    assert "[Login]\nInhibitDelayMaxSec=30\n" in dropin
    assert (logind.reloads, logind.delay) == (1, 30)
    assert logind.held_locks() == 1 and logind.locks[0][0] == "pykubelet"
    # Long enough already: nothing is written.
    roomy = FakeLogind(inhibit_delay=60)
    other = tmp_path / "other"
    kept = NodeShutdownManager(services.eviction, RecordingBus(), roomy, [Group(0, 30)], "boot-1",
                               dropin=other / "99.conf")
    await kept.start()
    assert not other.exists() and roomy.reloads == 0 and roomy.held_locks() == 1


async def test_a_logind_that_keeps_a_lower_delay_is_an_error_saying_where_to_look(services, tmp_path, monkeypatch):
    monkeypatch.setattr("services.eviction.node_shutdown.RELOAD_WAIT", 0.2)
    logind = FakeLogind(inhibit_delay=5)  # reads no drop-in: as if another file set it lower
    m = manager(services, logind, RecordingBus(), [Group(0, 30)], tmp_path)
    with pytest.raises(RuntimeError, match="still lets an inhibitor delay a shutdown only 5s .* InhibitDelayMaxSec"):
        await m.start()
    assert logind.held_locks() == 0


async def test_a_shutdown_stops_the_pods_lowest_priority_first_then_lets_logind_go(services, tmp_path):
    logind, bus = FakeLogind(inhibit_delay=60), RecordingBus()
    web, quick = services.run_pod("web", grace=30), services.run_pod("quick", grace=3)
    dns = services.run_pod("dns", priority=CRITICAL, grace=30)
    services.run_pod("done", grace=30)
    with services.pod_sync.session() as s:
        s.get(DesiredPod, "uid-done").finished = True  # nothing of it runs any more
    m = manager(services, logind, bus, [Group(0, 20), Group(CRITICAL, 10)], tmp_path)
    await m.start()
    stopped_before_critical: list[set[str]] = []

    async def pod_sync() -> None:
        """Stops each pod once its decision is there; notes what was stopped when the critical
        pod's decision came."""
        seen: set[str] = set()
        while True:
            decided = set(services.decisions())
            if dns in decided and not stopped_before_critical:
                stopped_before_critical.append(seen.copy())
            for uid in decided - seen:
                services.stop(uid)
                seen.add(uid)
            await asyncio.sleep(0.01)

    acting = asyncio.create_task(pod_sync())
    try:
        await asyncio.wait_for(m.shut_down(), 10)
    finally:
        acting.cancel()
    decided = services.decisions()
    assert set(decided) == {web, quick, dns}
    assert {d.reason for d in decided.values()} == {TERMINATED}
    assert {d.message for d in decided.values()} == {TERMINATED_MESSAGE}
    # Each pod gets its group's period, or its own grace period if shorter.
    assert (decided[web].grace_period_seconds, decided[quick].grace_period_seconds,
            decided[dns].grace_period_seconds) == (20, 3, 10)
    assert stopped_before_critical == [{web, quick}], "the critical pod is stopped after the others are gone"
    decisions = [e.uids for e in bus.published if isinstance(e, EvictionsDecided)]
    assert [sorted(u) for u in decisions] == [sorted([web, quick]), [dns]]
    assert isinstance(bus.published[0], NodeShutdownChanged)
    assert node_events(bus) == [("Normal", "Shutdown", "Shutdown manager detected shutdown event")]
    row = services.shutdown_row()
    assert row.in_progress and row.boot_id == "boot-1" and row.ended_at is not None
    assert logind.held_locks() == 0, "the lock is let go once the pods are stopped"
    assert START_TIME._value.get() <= END_TIME._value.get()


def node_events(bus) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.message) for e in bus.published if isinstance(e, KubeEvent) and e.kind == "Node"]


async def test_a_pod_that_does_not_stop_holds_its_group_no_longer_than_its_period(services, tmp_path):
    logind = FakeLogind(inhibit_delay=60)
    stuck = services.run_pod("stuck")
    services.run_pod("dns", priority=CRITICAL)
    m = manager(services, logind, RecordingBus(), [Group(0, 1), Group(CRITICAL, 1)], tmp_path)
    await m.start()
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(m.shut_down(), 10)  # nobody stops anything
    assert 2.0 <= loop.time() - began < 4.0
    assert stuck in services.decisions() and logind.held_locks() == 0


async def test_a_cancelled_shutdown_ends_and_the_lock_is_taken_again(services, tmp_path):
    logind, bus = FakeLogind(inhibit_delay=60), RecordingBus()
    services.run_pod("web")
    m = manager(services, logind, bus, [Group(0, 1)], tmp_path)
    await m.start()
    await m.shut_down()
    assert logind.held_locks() == 0
    await m.cancelled()
    assert services.decisions() == {}, "static pods may run again"
    assert not services.shutdown_row().in_progress
    assert logind.held_locks() == 1
    assert isinstance(bus.published[-1], NodeShutdownChanged)
    assert node_events(bus)[-1] == ("Normal", "Shutdown", "Shutdown manager detected shutdown cancellation")


async def test_the_next_boot_ends_a_shutdown_the_last_one_left_in_progress(services, tmp_path):
    services.run_pod("web")
    first = manager(services, FakeLogind(inhibit_delay=60), RecordingBus(), [Group(0, 1)], tmp_path, this_boot="boot-1")
    await first.start()
    await first.shut_down()
    with services.eviction.session() as s:
        assert shutting_down(s, "boot-1") and not shutting_down(s, "boot-2")
    bus = RecordingBus()
    await manager(services, FakeLogind(inhibit_delay=60), bus, [Group(0, 1)], tmp_path, this_boot="boot-2").start()
    assert services.decisions() == {} and not services.shutdown_row().in_progress
    assert [type(e) for e in bus.published] == [NodeShutdownChanged]


async def test_loginds_signals_drive_the_manager(services, tmp_path):
    logind = FakeLogind(inhibit_delay=60)
    web = services.run_pod("web")
    m = manager(services, logind, RecordingBus(), [Group(0, 1)], tmp_path)
    running = asyncio.create_task(m.run())
    try:
        for _ in range(200):
            if logind.held_locks():
                break
            await asyncio.sleep(0.02)
        assert logind.held_locks() == 1
        logind.announce(True)
        for _ in range(200):
            if services.decisions() and not logind.held_locks():
                break
            await asyncio.sleep(0.02)
        assert web in services.decisions() and logind.held_locks() == 0
        logind.announce(False)
        for _ in range(200):
            if logind.held_locks():
                break
            await asyncio.sleep(0.02)
        assert logind.held_locks() == 1 and not services.shutdown_row().in_progress
    finally:
        running.cancel()


# -- pod-sync ----------------------------------------------------------------------------------


def as_eviction(store: Store) -> Store:
    return Store(store.path, writer="eviction")


def begin_shutdown(store: Store, decisions: dict[str, int]) -> None:
    with as_eviction(store).session() as s:
        s.merge(NodeShutdown(id=1, boot_id=boot_id(), in_progress=True))
        for uid, grace in decisions.items():
            s.merge(PodEviction(uid=uid, namespace="default", name="p", signal="node-shutdown", reason=TERMINATED,
                                message=TERMINATED_MESSAGE, grace_period_seconds=grace))


def end_shutdown(store: Store) -> None:
    with as_eviction(store).session() as s:
        s.get(NodeShutdown, 1).in_progress = False
        s.query(PodEviction).delete()


async def test_pod_sync_stops_a_pod_for_the_shutdown_and_reports_it_terminated(syncer, rt, store):
    want(store, manifest(grace=30))
    await syncer.sync("uid1")
    [running] = rt.running()
    begin_shutdown(store, {"uid1": 7})
    await syncer.sync("uid1")
    assert not rt.running() and not any(sb.state == cri.SANDBOX_READY for sb in rt.sandboxes.values())
    assert rt.stop_timeouts[running.id] == 7
    with store.session() as s:
        row = s.get(DesiredPod, "uid1")
    assert (row.rejection_reason, row.rejection_message) == (TERMINATED, TERMINATED_MESSAGE)
    status, _ = compute_status(manifest(), {"sandbox_ready": False, "containers": observed(store).containers},
                               None, rejection=(row.rejection_reason, row.rejection_message))
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", TERMINATED, TERMINATED_MESSAGE)
    [target] = [c for c in status["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == ("True", "TerminationByKubelet",
                                                                       TERMINATED_MESSAGE)


async def test_no_pod_is_admitted_while_the_node_shuts_down(syncer, rt, store):
    begin_shutdown(store, {})
    want(store, manifest(uid="late"))
    await syncer.sync("late")
    assert rt.ops("run_podsandbox") == []
    with store.session() as s:
        row = s.get(DesiredPod, "late")
    assert (row.admitted, row.rejection_reason, row.rejection_message) == (
        False, "NodeShutdown", "Pod was rejected as the node is shutting down.")


async def test_a_static_pod_runs_again_once_the_shutdown_is_over_an_api_pod_stays_failed(syncer, rt, store):
    want(store, manifest(uid="static1"))  # want() writes a static (file) pod
    pod = manifest(uid="api1")
    with store.session() as s:
        s.merge(DesiredPod(uid="api1", namespace="default", name="p", source="api", manifest=pod.to_manifest()))
    for uid in ("static1", "api1"):
        await syncer.sync(uid)
    assert len(rt.running()) == 2
    begin_shutdown(store, {"static1": 1, "api1": 1})
    for uid in ("static1", "api1"):
        await syncer.sync(uid)
    assert not rt.running()
    await syncer.sync("static1")
    assert not rt.running(), "nothing comes back while the node is still shutting down"
    end_shutdown(store)  # cancelled, or the next boot
    for uid in ("static1", "api1"):
        await syncer.sync(uid)
    [again] = rt.running()
    assert again.labels["io.kubernetes.pod.uid"] == "static1"
    with store.session() as s:
        static, api = s.get(DesiredPod, "static1"), s.get(DesiredPod, "api1")
    assert (static.admitted, static.rejection_reason) == (True, "")
    assert api.rejection_reason == TERMINATED


# -- status-reporter ---------------------------------------------------------------------------


def test_a_static_pod_running_again_leaves_the_failed_phase_the_shutdown_gave_it():
    pod = manifest()
    failed = {"phase": "Failed", "reason": TERMINATED, "message": TERMINATED_MESSAGE, "conditions": []}
    running = {"sandbox_ready": True, "pod_ip": "10.88.0.5", "containers": [
        {"name": "app", "state": "running", "container_id": "containerd://c1", "started_at": "2026-01-01T00:00:00Z"}]}
    status, _ = compute_status(pod, running, failed)
    assert status["phase"] == "Running"
    assert _left_terminal({"status": {"phase": "Failed"}}, status), "its mirror pod is made anew"
    # Any other terminal phase stays.
    evicted = {**failed, "reason": "Evicted"}
    assert compute_status(pod, running, evicted)[0]["phase"] == "Failed"
    assert not _left_terminal({"status": {"phase": "Running"}}, status)


def test_the_node_is_not_ready_while_it_shuts_down(store):
    with Store(store.path, writer="pod-sync").session() as s:
        s.merge(NodeHealth(id=1, runtime_ready=True, pleg_healthy=True))
    agent = NodeAgent(None, store, "node1", "/var/lib/pykubelet", 110, 40, 10, 300, lambda *a: None)
    assert agent.health()[:2] == (True, "")
    begin_shutdown(store, {})
    assert agent.health()[:2] == (False, NOT_READY)


async def test_pykubelet_status_says_the_node_is_shutting_down_and_which_pods_it_stopped(syncer, rt, store):
    want(store, manifest(grace=30))
    await syncer.sync("uid1")
    begin_shutdown(store, {"uid1": 5})
    report = pressure_report(store)
    assert report["shutdown"]["inProgress"] is True
    report["signals"] = [{"signal": "memory.available", "available": 2**30, "capacity": 2**31}]
    lines = render_pressure(report)
    assert any("the node is shutting down since" in line and "no pod is admitted" in line for line in lines), lines
    assert any(line.strip().startswith("stopped for the node shutdown default/p at") for line in lines), lines


@pytest.mark.parametrize("answer", [0, -1, 1, True, "1234", None, 2.5])
def test_a_pid_for_logind_that_would_signal_another_process_is_refused(answer):
    with pytest.raises(LogindError, match="not a pid to signal"):
        logind_pid(answer)
    assert logind_pid(4242) == 4242
