"""Give a prepared store engine (shared/store/db.py, prepare_engine_for_fork) everything it
builds on first use, before the services are forked from it.

SQLAlchemy compiles each kind of statement once and keeps it in caches (the engine's query
cache, each mapper's cache of its INSERT, UPDATE and DELETE statements) along with what the
dialect learns on its first connection. Made in each service, those take 5-6 MiB a process;
made here, once, they are shared pages. Every table is read by primary key and in full, and a
row of each is inserted, changed and deleted; all of it in one transaction that is rolled back,
so the store is left as it was. A statement a service builds that is not among these is
compiled there, as before: this only saves memory, it changes no result.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Text, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapper, Session
from sqlalchemy.sql.elements import NamedColumn

from shared.store.models import Base

log = logging.getLogger(__name__)

# A value each column type accepts, for the rolled-back sample rows.
_SAMPLES: list[tuple[type, Any]] = [
    (Boolean, False), (Integer, 0), (Float, 0.0), (DateTime, datetime(2000, 1, 1, tzinfo=timezone.utc)),
    (JSON, {}), (Text, "warm-up"), (String, "warm-up"),
]


def _sample(column: NamedColumn[Any]) -> Any:
    for kind, value in _SAMPLES:
        if isinstance(column.type, kind):
            return value
    raise TypeError(f"no sample value for column {column.name} ({column.type})")


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-changed"
    if isinstance(value, dict):
        return {"changed": True}
    return value


def _exercise(session: Session, mapper: Mapper[Any]) -> None:
    cls = mapper.class_
    values = {attr.key: _sample(attr.columns[0]) for attr in mapper.column_attrs}
    key = tuple(values[mapper.get_property_by_column(c).key] for c in mapper.primary_key)
    session.get(cls, key if len(key) > 1 else key[0])
    session.execute(select(cls)).scalars().all()
    row = cls(**values)
    session.add(row)
    session.flush()
    primary = {mapper.get_property_by_column(c).key for c in mapper.primary_key}
    for name, value in values.items():
        if name not in primary:
            setattr(row, name, _changed(value))
    session.flush()
    session.delete(row)
    session.flush()


def warm_up(engine: Engine) -> None:
    """Never raises: without it the services only take more memory."""
    try:
        # A plain session: the ownership checks belong to the services' sessions, and nothing
        # done here is committed.
        with Session(engine) as session:
            try:
                for mapper in Base.registry.mappers:
                    _exercise(session, mapper)
            finally:
                session.rollback()
    except Exception as exc:  # a damaged or locked store, a table that changed: not worth failing for
        log.warning("store statements not prepared before forking the services (%s); each compiles its own", exc)
    finally:
        engine.dispose()  # no connection may cross the fork
