"""The one codec of the run folder's records: every record round-trips, every readable old
result.json reads, and a hand-edited file is refused with one phrase (then counts as
unfinished)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spider2local.core.codec import RecordError, dump, load
from spider2local.core.results import (
    READABLE_VERSIONS,
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
from spider2local.core.verdicts import ColumnDiagnostic, DiffRow, RowDiff, TableScore, TaskScore

OLD_RUN = Path(__file__).parents[1] / "run" / "data" / "pre-trials-run"
"""A run folder written by spider2local at result schema 4 and manifest version 2."""

DIFF = RowDiff(("x (#0)", "k (#1)"), ("x", "k"), (DiffRow(("3", "'c'"), 1, (1,)),),
               (DiffRow(("2", "'b'"), 2),), 1, 2)
SCORE = TaskScore(False, (
    TableScore("orders", True, 3, 3, row_aligned=False, row_aligned_note="order differs"),
    TableScore("daily", False, 3, 2, columns=(
        ColumnDiagnostic("amount", 1, "1 of 3 values differ", "amount", 2, "1.5", "2.5"),),
        notes=("near-miss name",), row_diff=DIFF),
    TableScore("gone", False, 1, None, missing=True, error="cannot read")), error=None)
FULL = TaskResult(
    task_id="t1", status=Status.FAILED, agent="claude", fake_date="2024-09-15",
    started_at="s", finished_at="f", durations={"agent": 1.5, "total": 2.0},
    usage=Usage(turns=3, subagent_turns=1, input_tokens=10, output_tokens=5,
                cache_read_tokens=2, cache_creation_tokens=1, cost_usd_reported=0.5,
                cost_usd_computed=0.25, by_model={"m": {"input_tokens": 10}}),
    passed=False, tables_passed=1, tables_total=3, score=SCORE,
    error=TaskError(Stage.AGENT, ErrorKind.AGENT, "gave up", None), attempts=2,
    model="m", verified=True, integrity=Integrity.SUSPECT,
    integrity_evidence=(Evidence("transcript.jsonl", 4, "gold path", "ls /gold"),
                        Evidence("project/x.sql", None, "dataset root", "ATTACH")),
    isolation="namespace", trial=2, cut_by_budget=True, graded_sha256="ab" * 32,
    replayed={"run": "r0", "trial": 1, "lenient": False, "diverged": None})


@pytest.mark.parametrize("record", [
    FULL, SCORE, DIFF, FULL.usage, FULL.error, FULL.integrity_evidence[1],
    TaskResult("t", Status.UNSCORED, "noop", "2024-01-01", "s", "f"),
    TaskScore(False, (), "the result database cannot be opened"),
])
def test_every_record_survives_a_json_round_trip(record: Any) -> None:
    data = json.loads(json.dumps(dump(record), allow_nan=False))
    read = TaskResult.from_json(data) if isinstance(record, TaskResult) \
        else load(type(record), data)  # a result is read through its upgrade step
    assert read == record


def test_dump_writes_plain_json_with_the_derived_values_beside_the_fields() -> None:
    data = dump(FULL)
    assert data["status"] == "failed" and data["integrity"] == "suspect"  # enums as values
    assert data["error"] == {"stage": "agent", "kind": "agent", "message": "gave up",
                             "exception": None}
    assert isinstance(data["integrity_evidence"], list) and data["schema_version"] == 6
    # failure_class / failure_detail are derived: written after every field, recomputed on read
    assert list(data)[-3:] == ["schema_version", "failure_class", "failure_detail"]
    assert (data["failure_class"], data["failure_detail"]) == ("suspect", "")
    score = data["score"]
    assert (score["tables_passed"], score["tables_total"], score["lenient"],
            score["row_aligned"]) == (1, 3, False, None)
    assert [t["lenient"] for t in score["tables"]] == [True, False, False]
    assert score["tables"][1]["row_diff"]["missing"][0] == {"values": ["3", "'c'"],
                                                            "count": 1, "marked": [1]}
    edited = {**data, "failure_class": "timeout", "score": {**score, "tables_passed": 99}}
    assert TaskResult.from_json(edited) == FULL  # a derived value never overrides the fields


@pytest.mark.parametrize(("edit", "phrase"), [
    (lambda d: d["usage"].update(turns="3"), "usage.turns: Input should be a valid integer"),
    (lambda d: d.update(passed=1), "passed: Input should be a valid boolean"),
    (lambda d: d.update(status="won"), "status: Input should be"),
    (lambda d: d["score"]["tables"][0].update(gold_rows=None),
     "score.tables.0.gold_rows: Input should be a valid integer"),
    (lambda d: d["durations"].update(total=True), "durations.total: Input should be a valid"),
    (lambda d: d.update(integrity_evidence="none"),
     "integrity_evidence: Input should be a valid array"),
    (lambda d: d.update(surprise=1), "surprise: Unexpected keyword argument"),
    (lambda d: d["usage"].update(dollars=1), "usage.dollars: Unexpected keyword argument"),
    (lambda d: d.update(trial=0), "trial is 0 (trials count from 1)"),
    (lambda d: d.update(schema_version=True), "result schema True is not one of"),
    (lambda d: d.pop("task_id"), "task_id: Field required"),
])
def test_a_hand_edited_result_is_refused_in_one_phrase_and_counts_as_unfinished(
        tmp_path: Path, edit: Any, phrase: str) -> None:
    data = dump(FULL)
    edit(data)
    with pytest.raises(RecordError) as refused:
        TaskResult.from_json(data)
    assert str(refused.value).startswith(phrase) and "\n" not in str(refused.value)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    assert load_result(path) is None  # unfinished: a resume runs it again


def test_a_result_that_is_no_object_is_refused() -> None:
    with pytest.raises(RecordError, match="not a JSON object but list"):
        TaskResult.from_json([])


@pytest.mark.parametrize("task", ["bakery001", "fleet001", "gym001", "library001"])
def test_a_real_schema_4_result_reads_and_writes_back_in_the_current_schema(
        tmp_path: Path, task: str) -> None:
    stored = OLD_RUN / task / "result.json"
    assert json.loads(stored.read_text())["schema_version"] == 4
    old = load_result(stored)
    assert old is not None and old.status is Status.PASSED and old.trial == 1
    assert old.score is not None and old.score.passed and old.score.tables_total >= 1
    assert old.score.tables[0].row_aligned is None  # written before the row-aligned check
    assert old.isolation == "not-needed" and old.graded_sha256 is None
    assert old.schema_version == SCHEMA_VERSION
    copy = tmp_path / "result.json"
    shutil.copy(stored, copy)
    save_result(copy, old)
    assert json.loads(copy.read_text())["schema_version"] == SCHEMA_VERSION
    assert load_result(copy) == old


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_every_readable_schema_reads(tmp_path: Path, version: int) -> None:
    """Each schema written with only the keys it had (see SCHEMA_VERSION's history)."""
    data = dump(replace(FULL, error=TaskError(Stage.SCORE, ErrorKind.EXCEPTION, "x",
                                              "ScoringError")))
    for key in ("failure_class", "failure_detail"):
        del data[key]
    lacks = {1: ["integrity", "integrity_evidence", "isolation", "trial", "cut_by_budget",
                 "graded_sha256", "replayed"],
             2: ["integrity", "integrity_evidence", "trial", "cut_by_budget",
                 "graded_sha256", "replayed"],
             3: ["trial", "cut_by_budget", "graded_sha256", "replayed"],
             4: ["cut_by_budget", "graded_sha256", "replayed"],
             5: ["graded_sha256", "replayed"]}.get(version, [])
    for key in lacks:
        del data[key]
    for table in data["score"]["tables"]:  # scores before the row-aligned check
        if version < 6:
            for key in ("row_aligned", "row_aligned_note", "row_diff", "lenient"):
                del table[key]
    if version == 1:
        data["error"] = {"stage": "score", "kind": "ScoringError", "message": "x"}
    data["schema_version"] = version
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    result = load_result(path)
    assert result is not None and result.schema_version == SCHEMA_VERSION
    assert result.error == TaskError(Stage.SCORE, ErrorKind.EXCEPTION, "x", "ScoringError")
    assert result.trial == (2 if version >= 4 else 1)
    assert result.cut_by_budget is (version >= 5)
    assert result.score is not None and result.score.tables_total == 3
