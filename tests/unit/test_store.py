import pytest
from sqlalchemy import delete, select

from shared.store import DesiredPod, NetworkStatus, OwnershipError, PodStatusRecord, Store


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
    ro = Store(tmp_path / "state.db", writer=None)
    with pytest.raises(OwnershipError, match="read-only client"):
        with ro.session() as s:
            s.merge(NetworkStatus(id=1))


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
