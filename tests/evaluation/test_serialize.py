"""Scores survive JSON (the runner stores them that way), and render readably."""

from __future__ import annotations

import json
from pathlib import Path

from spider2local.core.codec import dump, load
from spider2local.evaluation import (
    ColumnDiagnostic,
    TableScore,
    TaskScore,
    render_text,
    score_database,
)
from spider2local.evaluation.params import EvalParams
from tests.helpers import make_duckdb


def _failing_score(tmp_path: Path) -> TaskScore:
    """A real score with a missing table, a differing column and a date note."""
    gold = make_duckdb(tmp_path / "gold.duckdb", {
        "orders": "SELECT range AS id, range * 1.5 AS amount, DATE '2020-01-01' + range::INT AS d"
                  " FROM range(6)",
        "fct_customers": "SELECT 1 AS id"})
    result = make_duckdb(tmp_path / "result.duckdb", {
        "orders": "SELECT range AS id, range * 1.5 + (range = 3)::INT AS amount, "
                  "(DATE '2020-01-01' + range::INT)::VARCHAR AS d FROM range(6)",
        "dim_customers": "SELECT 1 AS id"})
    params = EvalParams("gold.duckdb", ("orders", "fct_customers"), ((), ()), (True, False))
    return score_database(result, gold, params)


def test_json_round_trip_of_a_real_failing_score(tmp_path: Path) -> None:
    score = _failing_score(tmp_path)
    data = json.loads(json.dumps(dump(score)))
    assert load(TaskScore, data) == score
    assert data["tables_passed"] == 0 and data["tables_total"] == 2
    orders = score.tables[0]
    assert {c.gold_column for c in orders.columns} == {"amount", "d"}
    assert score.tables[1].missing and "dim_customers" in score.tables[1].notes[0]


def test_json_round_trip_of_error_and_passing_scores() -> None:
    for score in (
        TaskScore(False, (TableScore("t", False, 3, None, error="cannot open"),), "cannot open"),
        TaskScore(True, (TableScore("t", True, 3, 3),)),
        TaskScore(False, (TableScore("t", False, 2, 2, columns=(
            ColumnDiagnostic("c", 4, "1 of 2 values differ", "c", 1, "1.5", "2.5"),),
            notes=("note",)),)),
    ):
        assert load(TaskScore, json.loads(json.dumps(dump(score)))) == score


def test_render_text_names_each_failure(tmp_path: Path) -> None:
    text = render_text(_failing_score(tmp_path))
    lines = text.splitlines()
    assert lines[0].startswith("FAIL  0/2")
    assert "gold column 'amount' (#1)" in text and "result column 'amount'" in text
    assert "first difference at position" in text
    assert "fct_customers: missing from the result" in text
    assert "would match result column 'd'" in text

