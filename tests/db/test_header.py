"""The DuckDB header check: magic bytes and a storage version the installed duckdb can read."""

from __future__ import annotations

import struct
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spider2local.db.header import (
    DEFAULT_BLOCK_BYTES,
    HEADER_BYTES,
    MIN_STORAGE_VERSION,
    block_size,
    duckdb_file_problem,
    expected_size,
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


# --- the size check against what DuckDB really writes ------------------------------------------

Op = tuple[str, int, int]
OPS = st.lists(st.tuples(st.sampled_from(["create", "drop", "insert", "checkpoint", "reopen"]),
                         st.integers(0, 2), st.sampled_from([0, 1, 5_000, 120_000, 300_000])),
               min_size=1, max_size=7)
"""Sequences of statements on up to three tables: big tables made and dropped (free blocks,
some of them cut off the file's end by DuckDB), rows added after, checkpoints, reopens."""


def build(path: Path, ops: list[Op]) -> None:
    con = duckdb.connect(str(path))
    tables: set[int] = set()
    try:
        for op, table, rows in ops:
            if op == "create" and table not in tables:
                con.execute(f"CREATE TABLE t{table} AS SELECT range AS a, range * 2 AS b "
                            f"FROM range({rows})")
                tables.add(table)
            elif op == "drop" and table in tables:
                con.execute(f"DROP TABLE t{table}")
                tables.discard(table)
            elif op == "insert" and table in tables:
                con.execute(f"INSERT INTO t{table} SELECT range, range FROM range({rows or 1})")
            elif op == "checkpoint":
                con.execute("CHECKPOINT")
            elif op == "reopen":
                con.close()
                con = duckdb.connect(str(path))
    finally:
        con.close()


def test_the_issues_file_duckdb_cut_short_is_accepted(tmp_path: Path) -> None:
    """duckdb 1.5.6: the file ends 1 block after the headers, where the header counts 2 (the
    dropped table's block is free, and cut off the end once the header is written)."""
    db = tmp_path / "a.duckdb"
    build(db, [("create", 0, 1), ("create", 1, 300_000), ("checkpoint", 0, 0), ("drop", 1, 0),
               ("checkpoint", 0, 0), ("insert", 0, 1)])
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM t0").fetchone() == (2,)
    header = db.read_bytes()[:HEADER_BYTES]
    counted = HEADER_BYTES + struct.unpack_from("<6Q", header, 4096)[4] * DEFAULT_BLOCK_BYTES
    assert db.stat().st_size < counted  # what the check used to refuse
    assert duckdb_file_problem(db) is None


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, cut=st.integers(1, 1 << 20))
def test_every_file_duckdb_writes_is_accepted_and_every_cut_is_refused(
        tmp_path_factory: pytest.TempPathFactory, ops: list[Op], cut: int) -> None:
    """Differential: each generated file opens in DuckDB and reads whole, and the check
    accepts it; the same file cut short mid-block, or cut before a block the header names,
    is refused."""
    folder = tmp_path_factory.mktemp("gen")
    db = folder / "g.duckdb"
    build(db, ops)
    with duckdb.connect(str(db), read_only=True) as con:
        for (name,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            con.execute(f"SELECT sum(a), sum(b) FROM {name}").fetchall()  # every block read
    assert duckdb_file_problem(db) is None, (ops, db.stat().st_size)
    data = db.read_bytes()
    if len(data) == HEADER_BYTES:
        return  # never checkpointed: nothing after the headers to cut
    header = data[:HEADER_BYTES]
    block, needed = block_size(header), expected_size(header)
    assert block is not None and needed is not None and HEADER_BYTES < needed <= len(data)
    short = folder / "short.duckdb"
    # Cut mid-block (a failed download, a copy onto a full disk), anywhere after the headers.
    whole = (len(data) - HEADER_BYTES) // block
    short.write_bytes(data[:HEADER_BYTES + (cut // block) % whole * block + cut % (block - 1) + 1])
    assert duckdb_file_problem(short) is not None, (ops, len(data), short.stat().st_size)
    # Cut at a block boundary before a block the header names (the catalog, the free list).
    short.write_bytes(data[:needed - block])
    assert duckdb_file_problem(short) is not None
