"""Describe a DuckDB file: every table and view with its schema, columns, types and row count.

The agent gets the start database's snapshot so it can plan without spending turns on
``information_schema`` queries, and the runner keeps it as the reference for what a run changed.
A running ``dbt run`` holds an exclusive lock that even blocks read-only readers, so
the snapshot retries briefly and then reads a private copy of the file instead of failing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import duckdb

from spider2local.core.codec import dump, load
from spider2local.db import catalog
from spider2local.db.connect import open_database
from spider2local.db.locks import DatabaseLocked, LockWait, retry_on_lock
from spider2local.db.sql import qualified
from spider2local.proc.tempdirs import make_owned_dir

LOCK_WAIT = LockWait(seconds=1.0, max_delay=0.4)
"""How long to wait for a lock before reading a copy: short, since the copy is as good."""


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: str


@dataclass(frozen=True)
class TableInfo:
    schema: str
    name: str
    kind: Literal["table", "view"]
    columns: tuple[ColumnInfo, ...]
    rows: int | None
    """Exact count for tables; None for views (counting runs the view's whole query, and a
    view over a dropped table would fail) and for tables that could not be counted."""


@dataclass(frozen=True)
class DbSnapshot:
    database: str
    """The file name (never the full path: a snapshot may be shown to the agent)."""
    tables: tuple[TableInfo, ...]
    read_from_copy: bool = False

    def table(self, name: str, schema: str | None = None) -> TableInfo | None:
        """Look a table up by name (case-insensitive, like DuckDB), optionally in one schema."""
        for t in self.tables:
            if t.name.lower() == name.lower() and (schema is None or t.schema == schema):
                return t
        return None

    def to_json(self) -> str:
        """The snapshot as JSON text (:mod:`spider2local.core.codec`)."""
        return json.dumps(dump(self), indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> DbSnapshot:
        """Raises :class:`~spider2local.core.codec.RecordError` (a ``ValueError``) naming the
        field of a snapshot no reader can use."""
        return load(cls, json.loads(text))


FileIdentity = tuple[tuple[str, int, int, int, int, int] | None, ...]
"""What a start database is, as the file system says it: for the file and its WAL, the real
path, device, inode, size, modification and change time (``None`` for a missing WAL)."""


def file_identity(db: Path) -> FileIdentity | None:
    """The :data:`FileIdentity` of ``db`` (``None`` when it cannot be read).

    Any write to either file changes its size or times, and the change time (``st_ctime_ns``)
    cannot be set back by ``touch`` or ``utime``; a file replaced by another has another
    inode. So an identity seen again names the same bytes, which is what lets a snapshot be
    taken once per start database and run
    (:func:`spider2local.sandbox.dbreads.snapshot_database`)."""
    found: list[tuple[str, int, int, int, int, int] | None] = []
    for path in (db, db.with_name(db.name + ".wal")):
        try:
            real = os.path.realpath(path)
            st = Path(real).stat()
        except FileNotFoundError:
            if path is db:
                return None
            found.append(None)
            continue
        except OSError:
            return None
        found.append((real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(found)


def read_snapshot(db: Path, label: str) -> DbSnapshot | dict[str, str]:
    """Inside the reader sandbox: snapshot ``db`` opened read-only; on a lock held by another
    process, retry, then copy. ``{"problem": ...}`` when it is not a readable DuckDB file."""
    try:
        return retry_on_lock(lambda: _snapshot(db, label, from_copy=False), LOCK_WAIT)
    except DatabaseLocked:
        pass
    except duckdb.Error as exc:  # corrupt, not DuckDB, too new: waiting would not help
        return {"problem": f"cannot open as DuckDB: {exc}"}
    with _private_copy(db) as copy:
        try:
            return _snapshot(copy, label, from_copy=True)
        except duckdb.Error as exc:
            return {"problem": f"cannot open as DuckDB (a copy, the file is locked): {exc}"}


def _snapshot(path: Path, label: str, *, from_copy: bool) -> DbSnapshot:
    con = open_database(path, untrusted=True)
    try:
        return DbSnapshot(database=label, tables=tuple(_tables(con)), read_from_copy=from_copy)
    finally:
        con.close()


def _tables(con: duckdb.DuckDBPyConnection) -> Iterator[TableInfo]:
    """Every table and view, with its columns read in one statement for all of them (the
    catalog's questions are :mod:`.catalog`'s, asked as it says why)."""
    found = catalog.columns(con)
    for rel in catalog.relations(con):
        yield TableInfo(schema=rel.schema, name=rel.name, kind=rel.kind,
                        columns=tuple(ColumnInfo(c, t)
                                      for c, t in found.get((rel.schema, rel.name), ())),
                        rows=_count(con, rel.schema, rel.name) if rel.kind == "table" else None)


def _count(con: duckdb.DuckDBPyConnection, schema: str, name: str) -> int | None:
    try:
        row = con.execute(f"SELECT count(*) FROM {qualified(schema, name)}").fetchone()
    except duckdb.Error:
        return None
    return int(row[0]) if row else None


@contextmanager
def _private_copy(db: Path) -> Iterator[Path]:
    """Copy ``db`` (and its WAL, which holds committed changes not yet checkpointed)."""
    tmp = make_owned_dir("snapshot")
    try:
        copy = tmp / db.name
        shutil.copyfile(db, copy)
        wal = db.with_name(db.name + ".wal")
        if wal.is_file():
            shutil.copyfile(wal, copy.with_name(copy.name + ".wal"))
        yield copy
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
