"""The reader children's answer protocol: an exception comes back as the fault rules need it."""

from __future__ import annotations

import io
import json
from typing import Any

import duckdb
import pytest

from spider2local.core.faults import is_machine_fault
from spider2local.db.locks import is_lock_error
from spider2local.exceptions import ScoringError
from spider2local.sandbox.reply import ReaderDuckDBError, result_of, serve

LOCK = 'IO Error: Could not set lock on file "/g.duckdb": Conflicting lock is held in PID 0.'


def answer_of(handler: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdin", io.StringIO("{}"))
    monkeypatch.setattr("sys.stdout", out)
    serve(handler)
    found = json.loads(out.getvalue())
    assert isinstance(found, dict)
    return found


def test_a_lock_under_a_scoring_error_stays_a_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(_: object) -> None:
        try:
            raise duckdb.IOException(LOCK)
        except duckdb.Error as exc:
            raise ScoringError(f"/g.duckdb: cannot open gold database: {exc}") from exc

    with pytest.raises(ScoringError) as caught:
        result_of(answer_of(handler, monkeypatch))
    cause = caught.value.__cause__
    assert isinstance(cause, ReaderDuckDBError) and is_lock_error(cause)
    assert cause.duckdb_type == "IOException" and is_machine_fault(caught.value)


def test_a_corrupt_file_is_not_a_machine_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(_: object) -> None:
        raise duckdb.IOException("IO Error: Corrupt database file: block 3 is bad")

    with pytest.raises(ReaderDuckDBError) as caught:
        result_of(answer_of(handler, monkeypatch))
    assert not is_machine_fault(caught.value) and caught.value.__cause__ is None
