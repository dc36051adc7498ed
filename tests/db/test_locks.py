"""One lock test and one retry loop: a held file is a lock, a corrupt file is not (and is never
waited on), and the three waiters (snapshot, checkpoint, query child) say so."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.db.locks import DatabaseLocked, LockWait, is_lock_error, retry_on_lock
from spider2local.dbtools.query import QueryLimits, QueryService
from spider2local.exceptions import DatasetError, ScoringError
from spider2local.sandbox.dbreads import snapshot_database
from spider2local.workspace.checkpoint import checkpoint_database
from tests.helpers import heavy_imports, hold_lock, make_duckdb

FIRST_BLOCK = 3 * 4096
"""DuckDB's file: a main header and two database headers of 4 KiB each, then the blocks, each
starting with its 8-byte checksum."""


def make_corrupt(path: Path) -> Path:
    """A real DuckDB file whose first block's checksum is wrong, as a bad disk would leave it."""
    make_duckdb(path, {"t": "SELECT range AS id, 'x' || range AS s FROM range(1000)"})
    with path.open("r+b") as fh:
        fh.seek(FIRST_BLOCK)
        fh.write(b"\xff" * 8)
    return path


def open_error(path: Path, *, read_only: bool = True) -> duckdb.Error:
    with pytest.raises(duckdb.Error) as info:
        duckdb.connect(str(path), read_only=read_only).close()
    return info.value


def test_a_corrupt_file_is_not_a_lock_error(tmp_path: Path) -> None:
    exc = open_error(make_corrupt(tmp_path / "bad.duckdb"))
    message = str(exc)
    # The trap the old substring test fell into: "block" holds "lock".
    assert "Corrupt database file" in message and "lock" in message.lower()
    assert not is_lock_error(exc)


@pytest.mark.process
def test_a_file_held_by_another_process_is_a_lock_error(tmp_path: Path) -> None:
    db = make_duckdb(tmp_path / "held.duckdb", {"t": "SELECT 1 AS id"})
    with hold_lock(db):
        for read_only in (True, False):
            exc = open_error(db, read_only=read_only)
            assert isinstance(exc, duckdb.IOException)
            assert is_lock_error(exc), str(exc)


def test_the_lock_words_elsewhere_in_a_message_are_not_a_lock() -> None:
    con = duckdb.connect()
    try:
        with pytest.raises(duckdb.Error) as info:
            con.execute('SELECT * FROM "Could not set lock on file x"')
    finally:
        con.close()
    assert "Could not set lock on file" in str(info.value)
    assert not is_lock_error(info.value)


def test_retry_passes_any_other_error_through_at_once(tmp_path: Path) -> None:
    bad = make_corrupt(tmp_path / "bad.duckdb")
    calls: list[float] = []

    def attempt() -> None:
        calls.append(time.monotonic())
        duckdb.connect(str(bad), read_only=True).close()

    with pytest.raises(duckdb.IOException, match="Corrupt database file"):
        retry_on_lock(attempt, LockWait(seconds=30))
    assert len(calls) == 1


@pytest.mark.process
def test_retry_gives_up_after_its_budget(tmp_path: Path) -> None:
    db = make_duckdb(tmp_path / "held.duckdb", {"t": "SELECT 1 AS id"})
    calls: list[float] = []

    def attempt() -> None:
        calls.append(time.monotonic())
        duckdb.connect(str(db), read_only=True).close()

    wait = LockWait(seconds=0.5, first_delay=0.05, max_delay=0.1)
    with hold_lock(db), pytest.raises(DatabaseLocked) as info:
        retry_on_lock(attempt, wait)
    # Pauses of 0.05, 0.1, 0.1, ... fit at most 5 times in 0.5 s: at most 6 attempts (fixed
    # 0.05 s pauses would make 10), and fewer only if the machine oversleeps.
    assert 2 <= len(calls) <= 6 and info.value.attempts == len(calls)
    assert is_lock_error(info.value.last) and info.value.__cause__ is info.value.last


@pytest.mark.process
def test_retry_succeeds_once_the_holder_lets_go(tmp_path: Path) -> None:
    db = make_duckdb(tmp_path / "held.duckdb", {"t": "SELECT 41 + 1 AS id"})
    calls = 0

    def attempt() -> int:
        nonlocal calls
        calls += 1
        con = duckdb.connect(str(db), read_only=True)
        try:
            row = con.execute("SELECT id FROM t").fetchone()
        finally:
            con.close()
        assert row is not None
        return int(row[0])

    with hold_lock(db) as release:
        timer = threading.Timer(0.4, release)
        timer.start()
        try:
            assert retry_on_lock(attempt, LockWait(seconds=20, first_delay=0.05)) == 42
        finally:
            timer.join()
    assert calls >= 2


@pytest.mark.process
def test_snapshot_reports_a_corrupt_file_as_unreadable_not_locked(tmp_path: Path) -> None:
    bad = make_corrupt(tmp_path / "bad.duckdb")
    with pytest.raises(DatasetError, match="Corrupt database file") as info:
        snapshot_database(bad)
    assert "bad.duckdb" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.duckdb"]


@pytest.mark.process
def test_checkpoint_reports_a_corrupt_file_as_corrupt_not_locked(tmp_path: Path) -> None:
    bad = make_corrupt(tmp_path / "bad.duckdb")
    with pytest.raises(ScoringError, match=r"cannot checkpoint: .*Corrupt database file") as info:
        checkpoint_database(bad, root=tmp_path)
    assert "locked" not in str(info.value)


@pytest.mark.process
def test_checkpoint_gives_up_on_a_lock_that_stays(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from spider2local.workspace import checkpoint as prepare

    monkeypatch.setattr(prepare, "CHECKPOINT_LOCK_WAIT", LockWait(seconds=0.3, first_delay=0.05))
    db = make_duckdb(tmp_path / "held.duckdb", {"t": "SELECT 1 AS id"})
    with hold_lock(db), pytest.raises(ScoringError, match="still locked by another process"):
        checkpoint_database(db, root=tmp_path)


@pytest.mark.process
def test_query_tool_reports_a_corrupt_file_as_corrupt_not_locked(tmp_path: Path) -> None:
    bad = make_corrupt(tmp_path / "bad.duckdb")
    service = QueryService(bad, os.environ, tmp_path / "queries.jsonl",
                           limits=QueryLimits(timeout=30, lock_wait=10))
    text, is_error = anyio.run(service.query, "SELECT count(*) FROM t")
    assert is_error
    assert "cannot open the database" in text and "Corrupt database file" in text
    assert "locked" not in text


@pytest.mark.process
def test_locks_imports_nothing_heavy() -> None:
    """The query child imports this on every agent query: the standard library only."""
    assert heavy_imports(["spider2local.db.locks", "spider2local.db.sql"],
                         ["duckdb", "pandas", "numpy", "anyio", "dbt"]) == []
