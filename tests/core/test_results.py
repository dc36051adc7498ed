"""The per-task result record: usage arithmetic, error kinds, and result.json across schemas."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spider2local.core.results import (
    SCHEMA_VERSION,
    ErrorKind,
    Evidence,
    Integrity,
    Stage,
    Status,
    TaskError,
    TaskResult,
    Usage,
    load_result,
    save_result,
)
from spider2local.core.verdicts import ColumnDiagnostic, TableScore, TaskScore

# Written by spider2local's result.json code at schema 1 (commit 366b058), verbatim.
V1_SCORING_ERROR = """{
  "task_id": "t2", "status": "error", "agent": "claude", "fake_date": "2024-09-15",
  "started_at": "2025-01-02T03:04:05+00:00", "finished_at": "2025-01-02T03:09:05+00:00",
  "durations": {"prepare": 1.5, "agent": 250.0, "score": 0.25, "total": 252.0},
  "usage": {"turns": 12, "input_tokens": 1000, "output_tokens": 200, "cache_read_tokens": 0,
            "cache_creation_tokens": 0, "cost_usd_reported": null, "cost_usd_computed": 0.42,
            "by_model": {"claude-sonnet-4-5": {"input_tokens": 1000, "output_tokens": 200}}},
  "passed": null, "tables_passed": 0, "tables_total": 0, "score": null,
  "error": {"stage": "score", "kind": "ScoringError",
            "message": "gold table 'orders' cannot be read"},
  "attempts": 1, "model": "claude-sonnet-4-5", "verified": null, "schema_version": 1
}"""
V1_TIMEOUT = (
    '{"task_id": "t3", "status": "timeout", "agent": "claude", "fake_date": "2024-09-15", '
    '"started_at": "s", "finished_at": "f", "durations": {}, "usage": {"turns": 0, '
    '"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_creation_tokens": 0, '
    '"cost_usd_reported": null, "cost_usd_computed": null, "by_model": {}}, "passed": false, '
    '"tables_passed": 0, "tables_total": 1, "score": null, "error": {"stage": "agent", '
    '"kind": "timeout", "message": "deadline of 1800s reached; its processes were killed"}, '
    '"attempts": 1, "model": null, "verified": null, "schema_version": 1}')


def test_usage_add_sums_every_field() -> None:
    a = Usage(turns=1, input_tokens=2, output_tokens=3, cache_read_tokens=4,
              cache_creation_tokens=5, cost_usd_reported=None, cost_usd_computed=0.25,
              by_model={"x": {"input_tokens": 2}})
    b = Usage(turns=10, input_tokens=20, output_tokens=30, cache_read_tokens=40,
              cache_creation_tokens=50, cost_usd_reported=1.0, cost_usd_computed=0.5,
              by_model={"x": {"input_tokens": 20, "output_tokens": 30}, "y": {"input_tokens": 1}})
    total = a + b
    assert (total.turns, total.input_tokens, total.output_tokens, total.cache_read_tokens,
            total.cache_creation_tokens) == (11, 22, 33, 44, 55)
    assert total.cost_usd_reported == 1.0 and total.cost_usd_computed == pytest.approx(0.75)
    assert total.by_model == {"x": {"input_tokens": 22, "output_tokens": 30},
                              "y": {"input_tokens": 1}}
    assert (Usage() + Usage()).cost_usd is None  # no side knows a cost: still unknown
    assert a.by_model == {"x": {"input_tokens": 2}}  # inputs untouched
    spent = Usage()
    spent += a
    assert spent == a


def test_version_1_results_still_load(tmp_path: Path) -> None:
    """A run made before schema 2 resumes and reports without re-running anything: the class
    name kept in v1's ``kind`` becomes kind ``exception`` with the name beside it."""
    path = tmp_path / "result.json"
    path.write_text(V1_SCORING_ERROR)
    old = load_result(path)
    assert old is not None and old.status is Status.ERROR
    assert old.error == TaskError(Stage.SCORE, ErrorKind.EXCEPTION,
                                  "gold table 'orders' cannot be read", "ScoringError")
    assert old.usage.cost_usd == 0.42 and old.durations["total"] == 252.0
    assert old.schema_version == SCHEMA_VERSION == 6
    assert old.replayed is None  # a live trial, as every result before schema 6
    path.write_text(V1_TIMEOUT)
    timeout = load_result(path)
    assert timeout is not None and timeout.error is not None
    assert timeout.error.kind is ErrorKind.TIMEOUT and timeout.error.exception is None
    # Saved again (as a re-score does), the record is written in the current layout.
    save_result(path, old)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 6
    assert data["failure_class"] == "harness_error"  # derived, older files included
    assert data["error"] == {"stage": "score", "kind": "exception",
                             "message": "gold table 'orders' cannot be read",
                             "exception": "ScoringError"}
    assert load_result(path) == old


@pytest.mark.parametrize("error", [
    TaskError(Stage.AGENT, ErrorKind.AGENT, "HTTP 400"),
    TaskError(Stage.AGENT, ErrorKind.INFRASTRUCTURE, "HTTP 529"),
    TaskError(Stage.AGENT, ErrorKind.TIMEOUT, "deadline"),
    TaskError(Stage.CHECKPOINT, ErrorKind.EXCEPTION, "disk full", "OSError"),
])
def test_round_trip_keeps_kind_and_exception(tmp_path: Path, error: TaskError) -> None:
    result = TaskResult(task_id="t", status=Status.ERROR, agent="noop", fake_date="2024-09-15",
                        started_at="s", finished_at="f", error=error)
    save_result(tmp_path / "result.json", result)
    assert json.loads((tmp_path / "result.json").read_text())["error"]["kind"] == error.kind.value
    assert load_result(tmp_path / "result.json") == result


@pytest.mark.parametrize("mangle", [
    lambda d: d.update(schema_version=99),
    lambda d: d.pop("schema_version"),
    lambda d: d["error"].update(kind="ScoringError"),  # a v1 kind in a v2 file
])
def test_unreadable_results_are_rerun_not_misread(
        tmp_path: Path, mangle: Callable[[dict[str, Any]], None]) -> None:
    result = TaskResult(task_id="t", status=Status.ERROR, agent="noop", fake_date="2024-09-15",
                        started_at="s", finished_at="f",
                        error=TaskError(Stage.SCORE, ErrorKind.EXCEPTION, "x", "ScoringError"))
    data = result.to_json()
    mangle(data)
    (tmp_path / "result.json").write_text(json.dumps(data))
    assert load_result(tmp_path / "result.json") is None


def test_version_2_results_read_as_never_scanned_and_v3_keeps_the_evidence(
        tmp_path: Path) -> None:
    """A result written before the integrity scan existed is not called clean: it was never
    scanned. A suspect one keeps its evidence through a save and a load."""
    path = tmp_path / "result.json"
    v2 = TaskResult(task_id="t", status=Status.PASSED, agent="noop", fake_date="2024-09-15",
                    started_at="s", finished_at="f", passed=True).to_json()
    v2["schema_version"] = 2
    del v2["integrity"], v2["integrity_evidence"]
    path.write_text(json.dumps(v2))
    old = load_result(path)
    assert old is not None and old.integrity is None and old.integrity_evidence == ()
    evidence = (Evidence("project/models/m.sql", 3, "dataset root", "ATTACH '/data/x'"),)
    suspect = replace(old, integrity=Integrity.SUSPECT, integrity_evidence=evidence,
                      error=TaskError(Stage.SCORE, ErrorKind.INTEGRITY, "not scored: gold"))
    save_result(path, suspect)
    data = json.loads(path.read_text())
    assert data["integrity"] == "suspect" and data["error"]["kind"] == "integrity"
    assert data["integrity_evidence"][0]["source"] == "project/models/m.sql"
    assert load_result(path) == suspect


def test_results_before_trials_are_trial_1_and_a_trial_below_1_is_unreadable(
        tmp_path: Path) -> None:
    """A result.json written before trials existed (schema 3, no ``trial``) is trial 1 of a
    1-trial run; a trial number below 1 is a damaged file, re-run rather than misread."""
    path = tmp_path / "result.json"
    v3 = TaskResult(task_id="t", status=Status.PASSED, agent="noop", fake_date="2024-09-15",
                    started_at="s", finished_at="f", passed=True).to_json()
    v3["schema_version"] = 3
    del v3["trial"]
    path.write_text(json.dumps(v3))
    old = load_result(path)
    assert old is not None and old.trial == 1
    save_result(path, replace(old, trial=3))
    again = load_result(path)
    assert again is not None and again.trial == 3
    data = json.loads(path.read_text())
    for bad in (0, -1, "2", True):
        path.write_text(json.dumps({**data, "trial": bad}))
        assert load_result(path) is None, bad


@pytest.mark.parametrize(("fields", "expected"), [
    ({"status": Status.PASSED, "passed": True}, (None, "")),
    ({"status": Status.UNSCORED}, (None, "")),
    ({"status": Status.ERROR, "error": TaskError(Stage.AGENT, ErrorKind.INFRASTRUCTURE, "529")},
     ("infrastructure", "529")),
    ({"status": Status.TIMEOUT, "passed": False, "score": None}, ("timeout", "")),
    ({"status": Status.FAILED, "passed": False,
      "error": TaskError(Stage.AGENT, ErrorKind.AGENT, "the agent reached its turn limit")},
     ("turn_limit", "the agent reached its turn limit")),
    ({"status": Status.FAILED, "passed": False, "cut_by_budget": True}, ("budget", "")),
    ({"status": Status.FAILED, "passed": False, "integrity": Integrity.SUSPECT},
     ("suspect", "")),
    ({"status": Status.FAILED, "passed": False, "score": TaskScore(False, (
        TableScore("a", False, 3, None, missing=True), TableScore("b", False, 3, 2)))},
     ("table_missing", "a")),
    ({"status": Status.FAILED, "passed": False,
      "score": TaskScore(False, (TableScore("b", False, 3, 2),))},
     ("row_count", "b")),
    ({"status": Status.FAILED, "passed": False, "score": TaskScore(False, (
        TableScore("b", False, 3, 3, columns=(ColumnDiagnostic("x", 0, "differs"),
                                              ColumnDiagnostic("y", 1, "differs"))),))},
     ("wrong_values", "b.x, b.y")),
    ({"status": Status.FAILED, "passed": False,
      "score": TaskScore(False, (), error="cannot open")},
     ("no_database", "cannot open")),
])
def test_failure_class_is_derived_from_the_record(tmp_path: Path, fields: dict[str, Any],
                                                  expected: tuple[str | None, str]) -> None:
    result = TaskResult("t", agent="noop", fake_date="2024-01-01", started_at="s",
                        finished_at="f", **fields)
    found, detail = result.failure
    assert (None if found is None else found.value, detail) == expected
    path = tmp_path / "result.json"
    save_result(path, result)
    data = json.loads(path.read_text())
    assert (data["failure_class"], data["failure_detail"]) == expected
    assert load_result(path) == result
