"""Opening the SQLite store and enforcing that a service writes only the tables it owns."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import logging
import os
import sqlite3
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from prometheus_client import Histogram
from sqlalchemy import Delete, Insert, Join, RowMapping, Update, create_engine, event, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from shared.host.node_dirs import PRIVATE_FILE_MODE, private_dir, private_files
from shared.store.models import OWN_ROW_TABLES, TABLE_OWNERS, Base

# Bump when a table changes: older stores are rebuilt at start (see Store.create_schema).
SCHEMA_VERSION = 15


# Commits that wrote something (flush + SQLite commit, including waiting for the write lock):
# what each service's writes cost, and how many there are (the _count), under load.
STORE_WRITE_SECONDS = Histogram(
    "pykubelet_store_write_seconds", "Duration of store commits that wrote rows",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))


log = logging.getLogger(__name__)

T = TypeVar("T")


def is_corruption(exc: BaseException) -> bool:
    """SQLite says the file is damaged (truncated, overwritten), as opposed to busy or full."""
    orig = exc.orig if isinstance(exc, DatabaseError) else exc
    return isinstance(orig, sqlite3.DatabaseError) and \
        getattr(orig, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB")


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """One process at a time checks (and rebuilds) the store: services start together."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "r+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def store_files(path: Path) -> tuple[Path, ...]:
    """The store and the files SQLite keeps beside it (WAL mode), and the schema lock."""
    return (path, Path(f"{path}-wal"), Path(f"{path}-shm"), path.with_name(path.name + ".lock"))


def _create_private(path: Path) -> None:
    """Make the store file 0600 before SQLite opens it, whatever the umask of the process that
    opens it first: SQLite gives the -wal and -shm files it makes the mode of the store file."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE))


class OwnershipError(RuntimeError):
    """A service tried to write a table another service owns."""


def _corrupt(message: str) -> sqlite3.DatabaseError:
    err = sqlite3.DatabaseError(message)
    err.sqlite_errorname = "SQLITE_CORRUPT"
    return err


def _enable_wal(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    # Several processes write; wait for the lock rather than fail.
    cur.execute("PRAGMA busy_timeout=5000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _new_engine(path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 5})
    event.listen(engine, "do_connect", lambda *_: _create_private(path))
    event.listen(engine, "connect", _enable_wal)
    return engine


# Engines made before the process forked its services (`pykubelet up`'s preload), by store
# path; and the process that last took each one over (its own connection pool).
_prepared_engines: dict[Path, Engine] = {}
_engine_owner_pid: dict[Path, int] = {}


def prepare_engine_for_fork(path: Path | str) -> Engine:
    """Make the engine of the store at path now, in a process that will fork services: a Store
    for that path in a forked child uses it instead of making its own. Its compiled statement
    cache, the dialect's first-connect setup and everything the engine built on first use are
    then pages the children share (see shared/store/warm_up.py), not private copies each child
    makes again (~2 MiB a process for the engine alone). The caller disposes its connections
    before forking."""
    key = Path(path).resolve()
    engine = _prepared_engines.get(key)
    if engine is None:
        engine = _prepared_engines[key] = _new_engine(key)
        _engine_owner_pid[key] = os.getpid()
    return engine


def _inherited_engine(path: Path) -> Engine | None:
    key = path.resolve()
    engine = _prepared_engines.get(key)
    if engine is not None and _engine_owner_pid.get(key) != os.getpid():
        # A connection must never be shared across a fork: the first Store of a forked process
        # starts a pool of its own, leaving any connection the parent had to the parent
        # (SQLAlchemy's way after a fork).
        engine.dispose(close=False)
        _engine_owner_pid[key] = os.getpid()
    return engine


class Store:
    """The store as one service sees it: reads anything, writes its own tables only."""

    def __init__(self, path: Path | str, writer: str | None) -> None:
        self.path = Path(path)
        self.writer = writer
        self._inode: int | None = None  # of the file create_schema checked
        private_dir(self.path.parent)
        self.engine: Engine = _inherited_engine(self.path) or _new_engine(self.path)
        self._session_factory: sessionmaker[Session] | None = None
        self._thread: ThreadPoolExecutor | None = None

    @property
    def _sessions(self) -> sessionmaker[Session]:
        # Made on first use: a service that only reads rows and upserts never runs the ORM.
        if self._session_factory is None:
            self._session_factory = sessionmaker(self.engine, expire_on_commit=False)
            event.listen(self._session_factory, "before_flush", self._check_flush)
            event.listen(self._session_factory, "do_orm_execute", self._check_statement)
        return self._session_factory

    def create_schema(self) -> None:
        """Create the tables; a store written by another schema version is rebuilt, and a
        damaged one is moved aside and started afresh.

        Everything in the store can be derived again (pods from their sources, runtime state from
        CRI), so an upgrade drops the old tables instead of migrating them. Under a lock file:
        services starting together do this once. Files an older pykubelet left readable by
        others are made 0600 first, so the -wal and -shm SQLite makes next take that mode too."""
        private_files(*store_files(self.path), what="the state store's file")
        lock = store_files(self.path)[3]
        with _file_lock(lock):
            try:
                self._check_and_create()
            except DatabaseError as exc:
                if not is_corruption(exc):
                    raise
                self._move_aside(str(exc.orig))
                self._check_and_create()
            self._inode = os.stat(self.path).st_ino

    def replaced(self) -> bool:
        """The store file is no longer the one this process opened (another service rebuilt a
        damaged store): this process must reopen it, by restarting."""
        if self._inode is None:
            return False
        try:
            return os.stat(self.path).st_ino != self._inode
        except OSError:
            return True

    def _move_aside(self, why: str) -> None:
        self.engine.dispose()
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{self.path}{suffix}")
            if src.exists():
                src.rename(f"{aside}{suffix}")
        log.error("the state store %s is damaged (%s); moved it to %s and starting an empty one: the "
                  "services rebuild it from the pod sources and the runtime, running pods are adopted",
                  self.path, why, aside)

    def _check_and_create(self) -> None:
        with self.engine.connect() as conn:
            # Cheap on a store this size; a truncated or overwritten file shows here, not in the
            # middle of a pod sync.
            check = conn.exec_driver_sql("PRAGMA quick_check").scalar()
            if check != "ok":
                raise DatabaseError("PRAGMA quick_check", None,
                                    _corrupt(f"quick_check: {str(check)[:200]}"))
        with self.engine.connect() as conn:
            conn.exec_driver_sql("BEGIN EXCLUSIVE")
            version = conn.exec_driver_sql("PRAGMA user_version").scalar()
            if version != SCHEMA_VERSION:
                tables = [r[0] for r in conn.exec_driver_sql(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
                for table in tables:
                    conn.exec_driver_sql(f'DROP TABLE "{table}"')
                Base.metadata.create_all(conn)
                conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.exec_driver_sql("COMMIT")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work, committed on success, rolled back on error."""
        with self._sessions() as s:
            try:
                yield s
                start = time.monotonic()
                s.commit()
                if s.info.pop("wrote", False):
                    STORE_WRITE_SECONDS.observe(time.monotonic() - start)
            except BaseException:
                s.rollback()
                raise

    def upsert(self, model: type[Base], key: dict[str, Any], update: dict[str, Any],
               insert: dict[str, Any] | None = None) -> None:
        """Write one row of a table this service owns in one statement: set `update` on the row
        with this primary key, or add it with `insert` + `update`. No ORM unit of work: a row
        rewritten every few seconds (a heartbeat, the node's health) costs ~0.1 ms of CPU this
        way, ~1 ms through Session.get and a flush."""
        table = Base.metadata.tables[model.__tablename__]
        if table.name in OWN_ROW_TABLES:
            self._allowed_row(table.name, str(key.get("name")))
        else:
            self._allowed(table.name)
        stmt = sqlite_insert(table).values(**key, **(insert or {}), **update)
        stmt = stmt.on_conflict_do_update(index_elements=list(key), set_=update)
        start = time.monotonic()
        with self.engine.begin() as conn:
            conn.execute(stmt)
        STORE_WRITE_SECONDS.observe(time.monotonic() - start)

    def read_row(self, model: type[Base], key: dict[str, Any]) -> RowMapping | None:
        """One row by its primary key, as a read-only mapping: for a row a service reads on every
        poll. No Session, identity map or loading machinery runs; a service that reads and
        writes only this way (and with upsert) never touches the ORM's code, whose pages would
        otherwise be private copies in its process (services/supervisor/forking.py)."""
        table = Base.metadata.tables[model.__tablename__]
        stmt = select(table).where(*(table.c[column] == value for column, value in key.items()))
        with self.engine.connect() as conn:
            return conn.execute(stmt).mappings().first()

    def read_rows(self, model: type[Base]) -> list[RowMapping]:
        """Every row of a small table, as read_row reads one."""
        with self.engine.connect() as conn:
            return list(conn.execute(select(Base.metadata.tables[model.__tablename__])).mappings())

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Run work(*args), a function that reads and writes through this store, on the store's
        one thread and wait for it without holding the event loop.

        A write waits for SQLite's lock while another service (or process) commits, up to the
        busy timeout; called from the loop, that wait stops everything else the service does.
        One thread per store, not a pool: a service's writes then run one at a time, in the order
        they were asked for, as they did on the loop, so a read-then-write of one (an admission
        decision, a row it may delete) cannot interleave with another's."""
        return await asyncio.wrap_future(self.submit(work, *args))

    def submit(self, work: Callable[..., T], *args: Any) -> Future[T]:
        """Queue work(*args) on the store's thread (see run) without waiting for it."""
        if self._thread is None:  # made on first use, in the process that uses it (after a fork)
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"store-{self.writer or 'reader'}")
        return self._thread.submit(functools.partial(work, *args))

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None
        self.engine.dispose()

    def _allowed(self, table: str) -> None:
        owner = TABLE_OWNERS.get(table)
        if owner != self.writer:
            raise OwnershipError(
                f"{self.writer or 'a read-only client'} may not write table {table!r}; "
                f"only {owner} writes it (ask it by an event instead)"
            )

    def _allowed_row(self, table: str, name: str) -> None:
        if name != self.writer:
            raise OwnershipError(f"{self.writer or 'a read-only client'} may not write the {table!r} row "
                                 f"of {name!r}; each service writes its own row only")

    def _check_flush(self, session: Session, _ctx: UOWTransaction, _instances: object) -> None:
        for obj in list(session.new) + list(session.dirty) + list(session.deleted):
            table = obj.__table__.name
            if table in OWN_ROW_TABLES:
                self._allowed_row(table, obj.name)
            else:
                self._allowed(table)
            session.info["wrote"] = True

    def _check_statement(self, state: ORMExecuteState) -> None:
        stmt = state.statement
        if isinstance(stmt, (Insert, Update, Delete)):
            if isinstance(stmt.table, Join):
                # No one table to check the owner of (and a join has no name).
                raise OwnershipError("a write through a join is not allowed; write each table by itself")
            if stmt.table.name in OWN_ROW_TABLES:
                # A statement could touch any row: own rows are written through the ORM or
                # upsert only, which check the row's name.
                raise OwnershipError(f"{stmt.table.name!r} is written row by row (the ORM or Store.upsert) only")
            self._allowed(stmt.table.name)
            state.session.info["wrote"] = True
