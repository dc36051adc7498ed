"""The test suite's in-process readers (``SPIDER2LOCAL_READERS=in-process``): each reader of the
``sandbox`` package answers exactly what its sandboxed child answers (results and failures
alike), starts no process, is said on stderr, and gives up at its timeout; any other value
keeps the children and says so."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest

from spider2local.evaluation.params import EvalParams
from spider2local.exceptions import ScoringError
from spider2local.run.graded import keep_graded
from spider2local.sandbox import dbreads, graded, readers
from spider2local.sandbox.readers import IN_PROCESS, IN_PROCESS_ENV, ReaderFailed
from spider2local.sandbox.scoring import score_sandboxed_sync

pytestmark = pytest.mark.process


def _databases(tmp_path: Path) -> tuple[Path, Path, EvalParams]:
    gold, result = tmp_path / "gold.duckdb", tmp_path / "result.duckdb"
    for path, rows in ((gold, "(1, 'a', 2.5), (2, 'b', NULL)"),
                       (result, "(2, 'b', NULL), (1, 'a', 2.501)")):
        con = duckdb.connect(str(path))
        con.execute(f"CREATE TABLE t AS SELECT * FROM (VALUES {rows}) v(id, name, x)")
        con.execute("CREATE TABLE u AS SELECT 1 AS k")
        con.execute("CREATE VIEW w AS SELECT id FROM t")
        con.close()
    params = EvalParams(gold="gold.duckdb", condition_tabs=("t", "u"),
                        condition_cols=((), ()), ignore_orders=(True, False))
    return gold, result, params


def _answers(tmp_path: Path, gold: Path, result: Path, params: EvalParams) -> dict[str, Any]:
    """What each reader of the sandbox package gives back for the same files."""
    scratch = tmp_path / f"out-{time.monotonic_ns()}"
    scratch.mkdir()
    copy = scratch / "result.duckdb"
    copy.write_bytes(result.read_bytes())
    kept = anyio.run(keep_graded, copy, scratch / "graded.duckdb", ["t", "w", "nope"])
    failure: tuple[type[Exception], str] | None = None
    try:
        score_sandboxed_sync(result, tmp_path / "no-gold.duckdb", params)
    except Exception as exc:  # the failure is compared, whatever it is
        failure = (type(exc), str(exc))
    score = dataclasses.asdict(score_sandboxed_sync(result, gold, params))
    return {"score": score, "failure": failure,
            "checkpoint": dbreads.checkpoint_sandboxed(copy, 1.0),
            "snapshot": dbreads.snapshot_sandboxed(copy),
            "kept": {**kept.to_json(), "sha256": None, "bytes": None}}


def test_in_process_readers_answer_what_their_children_answer_and_start_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    gold, result, params = _databases(tmp_path)
    monkeypatch.delenv(IN_PROCESS_ENV, raising=False)
    children = _answers(tmp_path, gold, result, params)
    assert children["score"]["passed"] is True and children["failure"] is not None
    assert children["kept"]["tables"]["nope"] is not None  # a failure per table travels too

    monkeypatch.setenv(IN_PROCESS_ENV, IN_PROCESS)
    readers._say_mode.cache_clear()

    async def no_process(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a reader child was started: {args}")

    monkeypatch.setattr(readers, "run_process", no_process)
    assert _answers(tmp_path, gold, result, params) == children
    assert children["failure"][0] is ScoringError  # rebuilt alike on both sides
    said = capsys.readouterr().err
    assert said.count("DuckDB readers run IN THE RUNNER'S PROCESS") == 1  # once, not per job


def test_an_in_process_reader_past_its_timeout_is_a_reader_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(IN_PROCESS_ENV, IN_PROCESS)

    def slow(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(3)
        return {"tables": {}}

    monkeypatch.setattr(graded, "_job", slow)
    with pytest.raises(ReaderFailed, match=r"spider2local.sandbox.graded ran longer than 0.2 s"):
        anyio.run(lambda: readers.ask_reader(graded.__name__, {}, readers.ReaderFiles(),
                                             timeout=0.2))


def test_any_other_value_keeps_the_children_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    gold, result, params = _databases(tmp_path)
    monkeypatch.setenv(IN_PROCESS_ENV, "inprocess")
    readers._say_mode.cache_clear()

    async def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("answered in-process")

    monkeypatch.setattr(readers, "_ask_in_process", never)
    assert score_sandboxed_sync(result, gold, params).passed
    assert "SPIDER2LOCAL_READERS='inprocess' is not a mode" in capsys.readouterr().err
