"""The DuckDB header check: magic bytes and a storage version the installed duckdb can read."""

from __future__ import annotations

import struct
from pathlib import Path

import duckdb

from spider2local.db.header import (
    MIN_STORAGE_VERSION,
    duckdb_file_problem,
    max_storage_version,
    storage_version,
)
from tests.helpers import make_duckdb


def with_version(source: Path, target: Path, version: int) -> Path:
    """A copy of ``source`` whose header claims another storage version."""
    data = bytearray(source.read_bytes())
    struct.pack_into("<Q", data, 12, version)
    target.write_bytes(bytes(data))
    return target


def test_a_file_written_here_is_readable(tmp_path: Path) -> None:
    db = make_duckdb(tmp_path / "a.duckdb", {"t": "SELECT 1 AS x"})
    version = storage_version(db.read_bytes()[:20])
    assert version is not None and MIN_STORAGE_VERSION <= version <= max_storage_version()
    assert duckdb_file_problem(db) is None


def test_max_version_is_what_duckdb_reads(tmp_path: Path) -> None:
    newest = tmp_path / "newest.duckdb"
    con = duckdb.connect(str(newest), config={"storage_compatibility_version": "latest"})
    con.execute("CREATE TABLE t AS SELECT 1 AS x")
    con.close()
    assert storage_version(newest.read_bytes()[:20]) == max_storage_version()
    with duckdb.connect(str(newest), read_only=True) as con:
        assert con.execute("SELECT x FROM t").fetchall() == [(1,)]
    assert duckdb_file_problem(newest) is None


def test_newer_and_older_storage_versions_are_named(tmp_path: Path) -> None:
    db = make_duckdb(tmp_path / "a.duckdb", {"t": "SELECT 1 AS x"})
    newest = max_storage_version()
    newer = with_version(db, tmp_path / "new.duckdb", newest + 1)
    assert duckdb_file_problem(newer) == (
        f"new.duckdb was written by a newer DuckDB (storage version {newest + 1}); "
        f"this spider2local reads up to {newest}")
    older = with_version(db, tmp_path / "old.duckdb", 51)
    assert duckdb_file_problem(older) == (
        f"old.duckdb was written by an older DuckDB (storage version 51); "
        f"this spider2local reads {MIN_STORAGE_VERSION} to {newest}")


def test_not_duckdb_and_short_files(tmp_path: Path) -> None:
    (tmp_path / "x.duckdb").write_bytes(b"\0" * 8 + b"DUCK")  # magic but no version
    assert duckdb_file_problem(tmp_path / "x.duckdb") == "x.duckdb is not a DuckDB file"
    assert storage_version(b"SQLite format 3\0" + b"\0" * 8) is None
