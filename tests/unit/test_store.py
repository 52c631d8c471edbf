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


def _dump(path):
    import sqlite3

    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {t: con.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}, \
            con.execute("PRAGMA user_version").fetchone()[0]
    finally:
        con.close()


def test_warm_up_compiles_every_table_s_statements_and_leaves_the_store_as_it_was(tmp_path):
    from shared.store.db import prepare_engine_for_fork
    from shared.store.models import Base
    from shared.store.warm_up import warm_up

    db = tmp_path / "state.db"
    net = Store(db, writer="network")
    net.create_schema()
    with net.session() as s:
        s.merge(NetworkStatus(id=1, ready=True, pod_cidr="10.1.0.0/24"))
    before = _dump(db)
    engine = prepare_engine_for_fork(db)
    warm_up(engine)
    assert _dump(db) == before
    # Reads of every table (by key and in full) are compiled; each mapper has its writes.
    assert len(engine._compiled_cache) >= 2 * len(Base.registry.mappers)
    assert all(m._compiled_cache for m in Base.registry.mappers)
    assert engine.pool.checkedout() == 0 and engine.pool.checkedin() == 0, "no connection left to cross a fork"


def test_warm_up_of_a_damaged_store_only_logs(tmp_path, caplog):
    from shared.store.db import prepare_engine_for_fork
    from shared.store.warm_up import warm_up

    db = tmp_path / "state.db"
    db.write_bytes(b"not a database" * 100)
    warm_up(prepare_engine_for_fork(db))
    assert "store statements not prepared" in caplog.text


FORKED_STORE = """
import os, sys
from pathlib import Path
from shared.store import NetworkStatus, Store
from shared.store.db import prepare_engine_for_fork
db = Path(sys.argv[1])
engine = prepare_engine_for_fork(db)
Store(db, writer=None).create_schema()
parent_pool = engine.pool
engine.dispose()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    store = Store(db, writer="network")
    again = Store(db, writer="network")
    with store.session() as s:
        s.merge(NetworkStatus(id=1, ready=True, pod_cidr="10.9.0.0/24"))
    os.write(w, f"{store.engine is engine} {engine.pool is not parent_pool} {again.engine.pool is store.engine.pool}".encode())
    os._exit(0)
os.close(w)
print(os.read(r, 100).decode())
os.waitpid(pid, 0)
with Store(db, writer=None).session() as s:
    print(s.get(NetworkStatus, 1).pod_cidr)
"""


def test_a_forked_process_takes_over_the_prepared_engine_with_a_pool_of_its_own(tmp_path):
    import subprocess
    import sys

    from tests.integration.conftest import REPO

    out = subprocess.run([sys.executable, "-c", FORKED_STORE, str(tmp_path / "state.db")], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    # Same engine (its caches shared), a new pool once per process, and writes reach the file.
    assert out.stdout.split() == ["True", "True", "True", "10.9.0.0/24"]
