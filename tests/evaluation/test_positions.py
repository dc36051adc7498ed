"""``condition_cols`` positions are taken exactly as upstream's ``gold.iloc[:, cols]`` takes them.

Negative positions count from the end; a position outside the table makes iloc raise, which
upstream lets out of ``duckdb_match`` (evaluate.py then scores the task 0). Two properties pin
this down: the columns :func:`gold_positions` selects are iloc's, refusal included, on any list
of positions; and the verdicts of a table graded with such positions equal the reference
scorer's (tests/evaluation/reference_scorer.py, the official comparator's copy), in memory and
through whole database files.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spider2local.evaluation import score_database
from spider2local.evaluation.params import EvalConfigError, EvalParams, gold_positions, parse_eval
from spider2local.evaluation.reader import TableRead
from spider2local.evaluation.score import score_table
from tests.evaluation import reference_scorer as ref
from tests.helpers import FULL_PROPERTIES

SETTINGS: dict[str, Any] = {"deadline": None,
                            "suppress_health_check": [HealthCheck.too_slow]}
HUGE = [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**70, -(2**70), 10**30]
"""Beyond every width; some beyond int64, where iloc fails with another message (still
IndexError)."""
POSITIONS = st.lists(st.one_of(st.integers(-8, 8), st.sampled_from(HUGE)), max_size=6)
VALUES = [0, 1, 2, 10, -3]


@settings(max_examples=400 if FULL_PROPERTIES else 50, **SETTINGS)
@given(width=st.integers(0, 6), cols=POSITIONS)
def test_positions_select_what_iloc_selects(width: int, cols: list[int]) -> None:
    """Same columns, same order, repeats kept; an IndexError exactly when iloc raises."""
    gold = pd.DataFrame({f"c{i}": [i] for i in range(width)}, index=[0])
    try:
        expected: list[str] | None = (list(gold.iloc[:, cols].columns) if cols != []
                                      else list(gold.columns))
    except IndexError:
        expected = None
    try:
        found: list[str] | None = [f"c{i}" for i in gold_positions(cols, width)]
    except IndexError:
        found = None
    assert found == expected


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[list[int]], list[int], list[int]]:
    """Gold columns of small ints, the result's columns as indices into them (some dropped,
    reordered or repeated, sometimes one altered: -1 means a column no gold column equals),
    and the graded positions."""
    width = draw(st.integers(1, 4))
    rows = draw(st.integers(1, 3))
    gold = [draw(st.lists(st.sampled_from(VALUES), min_size=rows, max_size=rows))
            for _ in range(width)]
    result = draw(st.lists(st.integers(-1, width - 1), min_size=1, max_size=width + 1))
    cols = draw(st.lists(st.integers(-width - 2, width + 1), max_size=4))
    return gold, result, cols


def _select(columns: list[list[int]]) -> str:
    rows = len(columns[0])
    return "SELECT * FROM (VALUES " + ", ".join(
        "(" + ", ".join(str(c[r]) for c in columns) + ")" for r in range(rows)) + ") AS v(" + \
        ", ".join(f"c{i}" for i in range(len(columns))) + ")"


def _result_columns(gold: list[list[int]], picks: list[int]) -> list[list[int]]:
    return [gold[p] if p >= 0 else [99] * len(gold[0]) for p in picks]


@settings(max_examples=300 if FULL_PROPERTIES else 30, **SETTINGS)
@given(case=tables(), ignore_order=st.booleans())
def test_table_verdicts_with_any_positions_equal_reference(
        case: tuple[list[list[int]], list[int], list[int]], ignore_order: bool) -> None:
    gold_cols, picks, cols = case
    con = duckdb.connect()
    try:
        gold = con.execute(_select(gold_cols)).fetchdf()
        pred = con.execute(_select(_result_columns(gold_cols, picks))).fetchdf()
    finally:
        con.close()
    try:
        expected = ref.table_agrees(pred, gold, cols, ignore_order)
    except IndexError:  # upstream's iloc: the exception ends duckdb_match, the task scores 0
        expected = False
    score = score_table("t", gold, TableRead(pred), cols, ignore_order)
    assert score.passed == expected
    assert (score.error is not None) == (cols != [] and not all(
        -len(gold_cols) <= c < len(gold_cols) for c in cols))


@settings(max_examples=20 if FULL_PROPERTIES else 5, **SETTINGS)
@given(cases=st.lists(tables(), min_size=1, max_size=3), ignore_order=st.booleans())
def test_database_verdicts_with_any_positions_equal_reference(
        cases: list[tuple[list[list[int]], list[int], list[int]]], ignore_order: bool) -> None:
    """Whole files through :func:`score_database`, against upstream's ``duckdb_match``."""
    names = tuple(f"t{i}" for i in range(len(cases)))
    with tempfile.TemporaryDirectory() as tmp:
        gold_db, result_db = Path(tmp) / "gold.duckdb", Path(tmp) / "result.duckdb"
        with duckdb.connect(str(gold_db)) as gcon, duckdb.connect(str(result_db)) as rcon:
            for name, (gold_cols, picks, _) in zip(names, cases, strict=True):
                gcon.execute(f"CREATE TABLE {name} AS {_select(gold_cols)}")
                rcon.execute(f"CREATE TABLE {name} AS "
                             f"{_select(_result_columns(gold_cols, picks))}")
        cols = [case[2] for case in cases]
        orders = [ignore_order] * len(cases)
        params = EvalParams("gold.duckdb", names, tuple(tuple(c) for c in cols), tuple(orders))
        score = score_database(result_db, gold_db, params)
        read = ref.read_as_reference_stack
        assert [t.passed for t in score.tables] == ref.table_verdicts(
            result_db, gold_db, names, cols, orders, read)
        assert int(score.passed) == ref.duckdb_match(result_db, gold_db, names, cols, orders,
                                                     read)


def test_negative_positions_are_valid_config() -> None:
    """The loader and ``score --cols`` accept what iloc accepts (was: refused as invalid)."""
    params = parse_eval({"func": "duckdb_match", "parameters": {
        "gold": "g.duckdb", "condition_tabs": ["a"], "condition_cols": [[-1, 0, -2]]}})
    assert params.condition_cols == ((-1, 0, -2),)


@pytest.mark.parametrize("bad", [[True], [1.0], ["-1"], [None]])
def test_positions_must_be_integers(bad: list[Any]) -> None:
    """Not bools (iloc would read them as a mask), floats or strings: a config error."""
    with pytest.raises(EvalConfigError, match="integer column positions"):
        parse_eval({"func": "duckdb_match", "parameters": {
            "gold": "g.duckdb", "condition_tabs": ["a"], "condition_cols": [bad]}})
