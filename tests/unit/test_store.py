import os

import pytest
from sqlalchemy import delete, select

from shared.store import DesiredPod, NetworkStatus, NodeHealth, OwnershipError, PodStatusRecord, Store


def test_owner_writes_and_others_read(tmp_path):
    db = tmp_path / "state.db"
    net = Store(db, writer="network")
    net.create_schema()
    with net.session() as s:
        s.merge(NetworkStatus(id=1, ready=True, pod_cidr="10.1.0.0/24"))
    reader = Store(db, writer="pod-sync")
    with reader.session() as s:
        assert s.get(NetworkStatus, 1).pod_cidr == "10.1.0.0/24"
    with reader.session() as s:
        assert s.scalar(select(NetworkStatus.ready)) is True


def test_writing_anothers_table_is_refused(tmp_path):
    store = Store(tmp_path / "state.db", writer="network")
    store.create_schema()
    with pytest.raises(OwnershipError, match="only pod-sync writes it"):
        with store.session() as s:
            s.add(DesiredPod(uid="u", namespace="n", name="p", source="file", manifest={}))
    with pytest.raises(OwnershipError, match="only status-reporter writes it"):
        with store.session() as s:
            s.execute(delete(PodStatusRecord))
    with pytest.raises(OwnershipError, match="only pod-sync writes it"):
        store.upsert(NodeHealth, {"id": 1}, {"runtime_ready": True})
    ro = Store(tmp_path / "state.db", writer=None)
    with pytest.raises(OwnershipError, match="read-only client"):
        with ro.session() as s:
            s.merge(NetworkStatus(id=1))
    with pytest.raises(OwnershipError, match="read-only client"):
        ro.upsert(NetworkStatus, {"id": 1}, {"ready": True})


def test_upsert_adds_the_row_then_sets_only_what_it_names(tmp_path):
    store = Store(tmp_path / "state.db", writer="network")
    store.create_schema()
    store.upsert(NetworkStatus, {"id": 1}, {"ready": False}, insert={"pod_cidr": "10.1.0.0/24"})
    store.upsert(NetworkStatus, {"id": 1}, {"ready": True}, insert={"pod_cidr": "10.9.0.0/24"})
    with store.session() as s:
        rows = list(s.scalars(select(NetworkStatus)))
    assert [(r.id, r.ready, r.pod_cidr) for r in rows] == [(1, True, "10.1.0.0/24")]


def test_wal_mode(tmp_path):
    store = Store(tmp_path / "state.db", writer="network")
    store.create_schema()
    with store.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_a_store_from_another_schema_version_is_rebuilt(tmp_path):
    import sqlite3

    db = tmp_path / "state.db"
    old = sqlite3.connect(db)
    old.execute("CREATE TABLE desired_pods (uid TEXT PRIMARY KEY, gone_column TEXT NOT NULL)")
    old.execute("PRAGMA user_version = 1")
    old.commit()
    old.close()
    store = Store(db, writer="pod-sync")
    store.create_schema()
    store.create_schema()  # a second service starting: nothing to do
    with store.session() as s:
        s.add(DesiredPod(uid="u", namespace="n", name="p", source="file", manifest={}))
    with store.session() as s:
        assert s.get(DesiredPod, "u").name == "p"


def test_the_store_and_a_new_root_dir_are_private(tmp_path):
    import os
    import stat

    s = Store(tmp_path / "new-root" / "state.db", writer="pod-sync")
    s.create_schema()
    with s.session() as sess:  # a write: the WAL file exists now
        sess.merge(DesiredPod(uid="u", namespace="d", name="n", source="file", manifest={}))
    assert stat.S_IMODE(os.stat(tmp_path / "new-root").st_mode) == 0o750
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        path = tmp_path / "new-root" / name
        if path.exists():
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(tmp_path / "new-root" / "state.db").st_mode) == 0o600
    s.close()


def _store_with_a_pod(path):
    store = Store(path, writer="pod-sync")
    store.create_schema()
    with store.session() as s:
        s.add(DesiredPod(uid="u1", namespace="default", name="web", source="file", manifest={"spec": "x" * 5000}))
    store.close()


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_a_damaged_store_is_moved_aside_and_started_afresh(tmp_path, damage, caplog):
    path = tmp_path / "state.db"
    _store_with_a_pod(path)
    for f in (tmp_path / "state.db-wal", tmp_path / "state.db-shm"):
        f.unlink(missing_ok=True)
    if damage == "truncated":
        os.truncate(path, path.stat().st_size // 3)
    else:
        path.write_bytes(b"not a database" * 1000)
    store = Store(path, writer="pod-sync")
    store.create_schema()
    with store.session() as s:
        assert s.scalars(select(DesiredPod)).all() == []
    [aside] = tmp_path.glob("state.db.damaged-*")
    assert aside.stat().st_size > 0
    assert "is damaged" in caplog.text and str(aside) in caplog.text


def test_a_service_notices_the_store_was_replaced_under_it(tmp_path):
    path = tmp_path / "state.db"
    running = Store(path, writer="probe")
    running.create_schema()
    assert not running.replaced()
    running.engine.dispose()  # (its WAL checkpointed: the damage below is not papered over by it)
    path.write_bytes(b"garbage!" * 512)  # damaged under the running service; another one restarts
    restarted = Store(path, writer="pod-sync")
    restarted.create_schema()
    assert running.replaced() and not restarted.replaced()
    assert not Store(path, writer=None).replaced()  # a reader that never created it: no opinion


def test_only_damage_counts_as_corruption():
    import sqlite3

    from sqlalchemy.exc import DatabaseError, OperationalError

    from shared.store.db import is_corruption

    corrupt = sqlite3.DatabaseError("database disk image is malformed")
    corrupt.sqlite_errorname = "SQLITE_CORRUPT"
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorname = "SQLITE_FULL"
    assert is_corruption(DatabaseError("SELECT", None, corrupt))
    assert not is_corruption(OperationalError("INSERT", None, full))
