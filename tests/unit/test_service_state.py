"""Whether `pykubelet status` may call what the store holds current."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import insert

from services.cli.status_cmd import EXIT_CURRENT, EXIT_NOT_CURRENT, EXIT_NOT_RUNNING, collect, exit_code, render_table
from shared.store import DesiredPod, OwnershipError, PodStatusRecord, ServiceState, Store, service_state
from shared.store.service_state import STALE_AFTER, ServiceStateWriter, node_view, not_current, read_states

NOW = lambda: datetime.now(timezone.utc)  # noqa: E731


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "state.db"
    Store(path, writer=None).create_schema()
    return path


def done(write: Future[None] | None) -> None:
    """Wait for the write synced() queued on the store's thread."""
    assert write is not None, "synced() queued no write"
    write.result(timeout=10)


def writer(db, name: str) -> ServiceStateWriter:
    w = ServiceStateWriter(Store(db, writer=name), name)
    w.started()
    return w


def test_a_service_writes_its_own_row_only(db):
    store = Store(db, writer="pod-sync")
    with pytest.raises(OwnershipError, match="own row"):
        with store.session() as s:
            s.add(ServiceState(name="probe", pid=1))
    with pytest.raises(OwnershipError, match="row by row"):
        with store.session() as s:
            s.execute(insert(ServiceState).values(name="pod-sync", pid=1))
    with pytest.raises(OwnershipError, match="own row"):
        store.upsert(ServiceState, {"name": "probe"}, {"heartbeat_at": NOW()}, insert={"pid": 1})
    writer(db, "pod-sync")
    assert set(read_states(store)) == {"pod-sync"}


def test_the_heartbeat_moves_only_the_heartbeat_and_rewrites_a_lost_row(db):
    store = Store(db, writer="probe")
    w = writer(db, "probe")
    started = read_states(store)["probe"].started_at
    asyncio.run(w.heartbeat())
    after = read_states(store)["probe"]
    assert after.started_at == started and after.heartbeat_at > started
    with Store(db, writer=None).engine.begin() as conn:  # the store rebuilt under the service
        conn.exec_driver_sql("DELETE FROM service_state")
    asyncio.run(w.heartbeat())
    with store.session() as s:
        row = s.get(ServiceState, "probe")
        assert row is not None and row.pid == os.getpid() and row.started_at is not None
    assert read_states(store)["probe"].alive(NOW())


def test_rows_are_current_once_their_owner_reconciled_since_start(db):
    net = writer(db, "network")
    reader = Store(db, writer=None)
    reasons = not_current(read_states(reader), ["network"], NOW())
    assert len(reasons) == 1 and "network has not reconciled yet" in reasons[0]
    done(net.synced())
    assert not_current(read_states(reader), ["network"], NOW()) == []
    # Restarted: what it wrote before is the previous run's until it reconciles again.
    writer(db, "network")
    assert "has not reconciled yet" in not_current(read_states(reader), ["network"], NOW())[0]


def test_a_silent_or_stopped_owner_makes_its_rows_not_current(db):
    net = writer(db, "network")
    done(net.synced())
    reader = Store(db, writer=None)
    later = NOW() + timedelta(seconds=STALE_AFTER + 1)
    assert "network is not responding (last heard from 3" in not_current(read_states(reader), ["network"], later)[0]
    assert not node_view(read_states(reader), later).running
    net.stopped()
    states = read_states(reader)
    assert "network stopped at" in not_current(states, ["network"], NOW())[0]
    assert node_view(states, NOW()).describe(NOW()).startswith("not running (stopped at ")


def test_derived_rows_wait_for_their_producer(db, monkeypatch):
    """Pod status computed from the previous run's runtime rows is not current: the
    status-reporter must have synced after pod-sync reconciled."""
    monkeypatch.setattr(service_state, "SYNC_WRITE_INTERVAL", 0.0)
    reporter = writer(db, "status-reporter")
    done(reporter.synced())
    pod_sync = writer(db, "pod-sync")
    done(pod_sync.synced())
    reader = Store(db, writer=None)
    reasons = not_current(read_states(reader), ["pod-sync", "status-reporter"], NOW())
    assert reasons and "status-reporter has not caught up with pod-sync" in reasons[0]
    done(reporter.synced())
    assert not_current(read_states(reader), ["pod-sync", "status-reporter"], NOW()) == []


def _a_running_pod(db) -> None:
    with Store(db, writer="pod-sync").session() as s:
        s.add(DesiredPod(uid="u1", namespace="default", name="web", source="file", manifest={}))
    with Store(db, writer="status-reporter").session() as s:
        s.add(PodStatusRecord(uid="u1", namespace="default", name="web", source="file", phase="Running",
                              pod_ip="10.88.0.5", status={}))


def test_status_of_a_stopped_node_shows_no_pod_as_running(db):
    _a_running_pod(db)
    for name in ("pod-sync", "status-reporter", "network", "eviction"):
        w = writer(db, name)
        done(w.synced())
        w.stopped()
    data = collect(Store(db, writer=None))
    assert exit_code(data) == EXIT_NOT_RUNNING
    pod = data["pods"][0]
    assert (pod["phase"], pod["podIP"], pod["recordedPhase"], pod["recordedPodIP"]) == \
        ("Unknown", "", "Running", "10.88.0.5")
    table = render_table(data)
    assert table.startswith("node: not running (stopped at ")
    assert "default/web" in table and "Unknown" in table
    assert "what follows is the last recorded state, not what runs now" in table
    assert any(line.strip().startswith("last recorded at ") and line.endswith(": Running 10.88.0.5")
               for line in table.splitlines()), table


def test_status_right_after_a_start_is_not_current_until_reconciled(db):
    _a_running_pod(db)
    services = {name: writer(db, name) for name in ("pod-sync", "status-reporter", "network", "eviction")}
    data = collect(Store(db, writer=None))
    assert exit_code(data) == EXIT_NOT_CURRENT
    assert data["pods"][0]["phase"] == "Unknown"
    assert "pods not current: pod-sync has not reconciled yet" in render_table(data)
    for name in ("pod-sync", "network", "eviction", "status-reporter"):
        done(services[name].synced())
    data = collect(Store(db, writer=None))
    assert exit_code(data) == EXIT_CURRENT, data["notCurrent"]
    assert (data["pods"][0]["phase"], data["pods"][0]["podIP"]) == ("Running", "10.88.0.5")
    assert render_table(data).startswith("node: running\n")


def test_status_wait_returns_once_no_pod_is_pending_or_at_the_deadline(db, monkeypatch):
    import threading
    import time

    from services.cli import status_cmd

    monkeypatch.setattr(status_cmd, "WAIT_POLL", 0.05)
    with Store(db, writer="pod-sync").session() as s:
        s.add(DesiredPod(uid="u1", namespace="default", name="web", source="file", manifest={}))
    for name in ("pod-sync", "status-reporter", "network", "eviction"):
        done(writer(db, name).synced())
    reader = Store(db, writer=None)
    start = time.monotonic()
    data = status_cmd.collect_when_settled(reader, 0.3)
    assert time.monotonic() - start >= 0.3, "a Pending pod: waited the whole time"
    assert data["pods"][0]["phase"] == "Pending"

    def starts_later() -> None:
        time.sleep(0.2)
        with Store(db, writer="status-reporter").session() as s:
            s.add(PodStatusRecord(uid="u1", namespace="default", name="web", source="file", phase="Running",
                                  pod_ip="10.88.0.5", status={}))

    t = threading.Thread(target=starts_later)
    t.start()
    start = time.monotonic()
    data = status_cmd.collect_when_settled(reader, 30)
    t.join()
    assert time.monotonic() - start < 5, "returned when the pod started, not at the deadline"
    assert (data["pods"][0]["phase"], data["pods"][0]["podIP"]) == ("Running", "10.88.0.5")


@pytest.mark.parametrize("wait", ["-1", "nan", "inf", "soon"])
def test_status_refuses_a_wait_that_is_not_a_number_of_seconds(db, capsys, wait):
    from services.cli import status_cmd

    with pytest.raises(SystemExit):
        status_cmd.main(["--root-dir", str(db.parent), "--wait", wait])
    assert "--wait" in capsys.readouterr().err


async def test_heartbeat_waits_out_a_full_disk_but_stops_the_service_on_a_replaced_store(db, monkeypatch, caplog):
    import asyncio
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from shared.process import service

    monkeypatch.setattr(service, "HEARTBEAT_PERIOD", 0.01)
    store = Store(db, writer="probe")
    store.create_schema()
    state = writer(db, "probe")
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorname = "SQLITE_FULL"

    async def no_space() -> None:
        raise OperationalError("UPDATE", None, full)

    monkeypatch.setattr(state, "heartbeat", no_space)
    health = service.StoreHealth()
    beating = asyncio.create_task(service._heartbeat(store, state, health))
    await asyncio.sleep(0.1)
    assert not beating.done(), "a full disk does not stop the service"
    assert caplog.text.count("cannot write to the store") == 1, "logged once, not every beat"
    ok, why = health.check()
    assert not ok and "database or disk is full" in why, "/readyz says why"

    store.engine.dispose()
    db.rename(db.with_name("elsewhere.db"))
    Store(db, writer="pod-sync").create_schema()  # another service made a new one
    with pytest.raises(service.StoreReplaced):
        await asyncio.wait_for(beating, 5)


def test_a_reconcile_that_cannot_be_written_is_written_later(db, monkeypatch):
    from sqlalchemy.exc import OperationalError

    net = writer(db, "network")
    real_write = net._write

    def full(**fields):
        raise OperationalError("UPDATE", None, Exception("database or disk is full"))

    monkeypatch.setattr(net, "_write", full)
    done(net.synced())  # does not raise into the service's loop
    assert not net.reconciled
    monkeypatch.setattr(net, "_write", real_write)
    done(net.synced())
    assert net.reconciled and not_current(read_states(Store(db, writer=None)), ["network"], NOW()) == []


def test_admin_views_say_whether_they_are_current(db):
    from fastapi import APIRouter
    from fastapi.testclient import TestClient

    from shared.process.admin import AdminApp
    from shared.store.service_state import view_freshness

    store = Store(db, writer=None)
    app = AdminApp("status-reporter", {}, token="t" * 43, freshness=lambda: view_freshness(store, "status-reporter"))

    def views() -> APIRouter:
        r = APIRouter()

        @r.get("/pods")
        def pods() -> list:
            return []
        return r

    app.add_views(views)
    client = TestClient(app, headers={"Authorization": "Bearer " + "t" * 43})
    reporter = writer(db, "status-reporter")
    done(reporter.synced())
    res = client.get("/pods")
    assert res.headers["Pykubelet-Current"] == "no"
    assert "pod-sync has not run from this root dir" in res.headers["Pykubelet-Not-Current"]
    assert "Pykubelet-Current" not in client.get("/healthz").headers
    pod_sync = writer(db, "pod-sync")
    done(pod_sync.synced())
    reporter._written_sync = None  # its next reconcile is written at once
    done(reporter.synced())
    res = client.get("/pods")
    assert res.headers["Pykubelet-Current"] == "yes" and "Pykubelet-Not-Current" not in res.headers
