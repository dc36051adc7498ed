"""The one classifier of machine faults, fed the errors the machine really raises."""

from __future__ import annotations

import errno
from pathlib import Path

import duckdb
import pytest

from spider2local.core.faults import describe, is_machine_fault, names_machine_fault
from spider2local.db.locks import DatabaseLocked, LockWait, retry_on_lock
from spider2local.exceptions import ScoringError
from tests.helpers import hold_lock, make_duckdb


def _raised(action: object) -> BaseException:
    try:
        action()  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_a_full_disk_is_the_machines_fault_also_when_wrapped() -> None:
    def write_full() -> None:
        with open("/dev/full", "w") as fh:  # the kernel's always-full device: real ENOSPC
            fh.write("x")
            fh.flush()

    full = _raised(write_full)
    assert isinstance(full, OSError) and full.errno == errno.ENOSPC
    assert is_machine_fault(full)

    def wrapped() -> None:
        try:
            write_full()
        except OSError as exc:
            raise ScoringError("cannot checkpoint") from exc

    outer = _raised(wrapped)
    assert is_machine_fault(outer)
    assert describe(outer) == "cannot checkpoint: [Errno 28] No space left on device"

    # A second error raised while handling it (``__context__``, no ``from``) still counts.
    assert is_machine_fault(_raised(lambda: _context_chain(write_full)))


def _context_chain(fn: object) -> None:
    try:
        fn()  # type: ignore[operator]
    except OSError:
        raise RuntimeError("while handling it, another error")  # noqa: B904


@pytest.mark.process
def test_a_database_locked_by_another_process_is_the_machines_fault(tmp_path: Path) -> None:
    db = make_duckdb(tmp_path / "gold.duckdb", {"t": "SELECT 1 AS id"})
    with hold_lock(db):
        locked = _raised(lambda: duckdb.connect(str(db), read_only=True))
        waited = _raised(lambda: retry_on_lock(lambda: duckdb.connect(str(db), read_only=True),
                                               LockWait(seconds=0.2)))
    assert is_machine_fault(locked)
    assert isinstance(waited, DatabaseLocked) and is_machine_fault(waited)


def test_duckdb_messages_of_a_full_disk_or_no_memory_count() -> None:
    # DuckDB's IO errors carry no errno, only the OS's text (as written on a full tmpfs).
    full = duckdb.IOException('IO Error: Could not write file "/x/shop.duckdb.wal": '
                              "No space left on device")
    oom = duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate data of size 1GB")
    assert is_machine_fault(full) and is_machine_fault(oom)


@pytest.mark.parametrize("make", [
    lambda p: _raised(lambda: duckdb.connect(str(p / "corrupt.duckdb"))),
    lambda p: _raised(lambda: (p / "absent.sql").read_text()),
    lambda p: ValueError("No space left on device, said the agent"),
    lambda p: ScoringError("table orders is missing"),
], ids=["corrupt-db", "missing-file", "text-outside-duckdb", "scoring"])
def test_the_tasks_own_faults_are_not_the_machines(tmp_path: Path, make: object) -> None:
    (tmp_path / "corrupt.duckdb").write_bytes(b"not a database block lock" * 400)
    assert not is_machine_fault(make(tmp_path))  # type: ignore[operator]


def test_dbt_output_names_the_fault_but_not_permissions_or_locks() -> None:
    assert names_machine_fault("IO Error: Could not write ... No space left on device")
    assert names_machine_fault("[Errno 122] Disk quota exceeded: 'target/manifest.json'")
    assert not names_machine_fault("Permission denied: '/etc/shadow'")
    assert not names_machine_fault("IO Error: Could not set lock on file")
    assert not names_machine_fault("Compilation Error in model orders")
