"""Verdicts are those of the reference stack (duckdb 1.1.3 + pandas 2.2.3), whatever duckdb 1.x
is installed.

The quick tests pin facts measured under the reference stack (the values upstream sees, and
verdicts that flip under newer duckdb). The slow test measures them again: it builds a venv of
the reference stack (cached across sessions, see tests/helpers.cached_venv), runs upstream's
reading and comparison there (reference_scorer.py, driven by refstack_child.py) on fixed tables
of every class that reads differently and on Hypothesis-generated tables, and demands the same
values and verdicts from spider2local under the project's own stack.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from spider2local.evaluation import score_database
from spider2local.evaluation.params import EvalParams
from spider2local.evaluation.reader import Database
from spider2local.evaluation.refstack import REFERENCE_STACK, reference_frame
from spider2local.evaluation.score import score_table
from spider2local.exceptions import ScoringError
from tests.evaluation import reference_scorer as ref
from tests.evaluation.test_properties import (
    Case,
    Col,
    _column_values,
    _index,
    _positions,
    _result_table,
    cases,
    create_table,
)
from tests.helpers import FULL_PROPERTIES, VenvUnavailable, cached_venv, make_duckdb

CHILD = Path(__file__).with_name("refstack_child.py")
REQUIREMENTS = [f"{name}=={version}" for name, version in REFERENCE_STACK.items()]


def _typed(frame: pd.DataFrame) -> list[list[list[str]]]:
    lists = ref.column_lists(frame) if len(frame) else [[] for _ in frame.columns]
    return [[[type(v).__name__, repr(v)] for v in values] for values in lists]


def _read(tmp_path: Path, select: str) -> pd.DataFrame:
    db = make_duckdb(tmp_path / "t.duckdb", {"t": select})
    with Database(db) as con:
        read = con.read("t")
    assert read.frame is not None, read.error
    return read.frame


# What duckdb 1.1.3 + pandas 2.2.3 give for these tables (measured; the slow test re-measures).
READINGS = [
    ("SELECT * FROM (VALUES (true), (NULL)) v(b)",
     [[["bool", "True"], ["float", "nan"]]]),
    ("SELECT * FROM (VALUES (1, 2), (NULL, 3)) v(a, b)",  # nullable ints: floats, frame-wide
     [[["float", "1.0"], ["float", "nan"]], [["float", "2.0"], ["float", "3.0"]]]),
    ("SELECT * FROM (VALUES (1, 'x'), (NULL, 'y')) v(a, s)",
     [[["float", "1.0"], ["float", "nan"]], [["str", "'x'"], ["str", "'y'"]]]),
    ("SELECT * FROM (VALUES (INTERVAL 90 MINUTE, INTERVAL 14 MONTH), (NULL, INTERVAL 1 DAY)) "
     "v(a, b)",  # a frame of only intervals: integer nanoseconds
     [[["int", "5400000000000"], ["NoneType", "None"]],
      [["int", "36288000000000000"], ["int", "86400000000000"]]]),
    ("SELECT INTERVAL 1 HOUR AS a, 1 AS b",
     [[["Timedelta", "Timedelta('0 days 01:00:00')"]], [["int", "1"]]]),
    ("SELECT * FROM (VALUES (TIME '01:00:00', 1), (NULL, 2)) v(t, n)",
     [[["time", "datetime.time(1, 0)"], ["float", "nan"]], [["int", "1"], ["int", "2"]]]),
]


@pytest.mark.parametrize(("select", "expected"), READINGS)
def test_values_are_read_as_the_reference_stack_reads_them(tmp_path: Path, select: str,
                                                           expected: list[Any]) -> None:
    assert _typed(_read(tmp_path, select)) == expected


def test_frames_without_differing_classes_are_left_as_they_are() -> None:
    with duckdb.connect() as con:
        frame = con.execute("SELECT 1 AS a, 'x' AS s, DATE '2020-01-01' AS d, 1.5 AS f, "
                            "true AS b, NULL::VARCHAR AS n").fetchdf()
    assert reference_frame(frame) is frame


# Tables whose verdict differs between duckdb 1.1.3 and 1.5.6 (measured: reference_scorer.py
# gives 1 under the reference stack and 0 under duckdb 1.5.6 for each).
FLIPS = {
    "boolean with NULLs vs integers, order ignored": (
        "SELECT * FROM (VALUES (true), (NULL), (false)) v(b)",
        "SELECT * FROM (VALUES (1), (NULL), (0)) v(n)", ()),
    "an all-INTERVAL gold frame vs nanoseconds": (
        "SELECT INTERVAL 1 HOUR AS d", "SELECT 3600000000000::BIGINT AS d", ()),
    "a nullable integer column turns the gold frame's ints into floats": (
        "SELECT * FROM (VALUES (20000000000000000, 1), (25, NULL)) v(a, b)",
        "SELECT * FROM (VALUES (2e16::DOUBLE, 1.0::DOUBLE), (25.0::DOUBLE, NULL)) v(a, b)", ()),
}


@pytest.mark.parametrize("case", list(FLIPS))
def test_verdicts_are_the_reference_stacks(tmp_path: Path, case: str) -> None:
    gold_sql, result_sql, cols = FLIPS[case]
    gold = make_duckdb(tmp_path / "gold.duckdb", {"t": gold_sql})
    result = make_duckdb(tmp_path / "result.duckdb", {"t": result_sql})
    score = score_database(result, gold, EvalParams("gold.duckdb", ("t",), (cols,), (True,)))
    assert score.passed, score


def test_an_interval_beyond_nanoseconds_cannot_be_read(tmp_path: Path) -> None:
    """duckdb 1.1.3 refuses to read it ("Could not convert Interval to Nanoseconds"): a result
    table scores 0 with that error, and a gold table is a defect of the dataset."""
    huge = {"t": "SELECT INTERVAL 400 YEAR AS d"}
    fine = make_duckdb(tmp_path / "fine.duckdb", {"t": "SELECT INTERVAL 1 DAY AS d"})
    bad = make_duckdb(tmp_path / "bad.duckdb", huge)
    params = EvalParams("g.duckdb", ("t",), ((),), (True,))
    score = score_database(bad, fine, params)
    assert not score.passed
    assert "Interval to Nanoseconds" in (score.tables[0].error or "")
    with pytest.raises(ScoringError, match="Interval to Nanoseconds"):
        score_database(fine, bad, params)


NOTE_GOLD = ("SELECT * FROM (VALUES (true, 1, INTERVAL 1 DAY, 7, 1.5, 2), "
             "(NULL, NULL, INTERVAL 2 DAY, 8, NULL, NULL)) v(flag, qty, wait, plain, ratio, qty2)")


@pytest.mark.parametrize(("cols", "named"), [
    ((), ["'flag' (BOOLEAN with NULLs)", "'qty' (integers with NULLs)", "'wait' (INTERVAL)",
          "'qty2' (integers with NULLs)"]),
    ((2, 0, 2), ["'flag' (BOOLEAN with NULLs)", "'wait' (INTERVAL)"]),
    ((3, 4), []),
])
@pytest.mark.parametrize("result_sql", [NOTE_GOLD, "SELECT 1 AS x, 2 AS y"])
def test_graded_gold_columns_of_differing_classes_get_a_note(
        tmp_path: Path, cols: tuple[int, ...], named: list[str], result_sql: str) -> None:
    """Passing or failing, a table names its graded gold columns whose reading differs between
    stacks (each once, in table order), and only those; the verdict is the official one."""
    gold = make_duckdb(tmp_path / "gold.duckdb", {"t": NOTE_GOLD})
    result = make_duckdb(tmp_path / "result.duckdb", {"t": result_sql})
    params = EvalParams("gold.duckdb", ("t",), (cols,), (True,))
    table = score_database(result, gold, params).tables[0]
    assert table.passed == (result_sql == NOTE_GOLD)
    stack_notes = [note for note in table.notes if "reference stack" in note]
    if not named:
        assert stack_notes == []
        return
    assert len(stack_notes) == 1
    listed = stack_notes[0].split("column(s) ", 1)[1].split(" were read", 1)[0]
    assert listed == ", ".join(named)
    assert "duckdb 1.1.3" in stack_notes[0]


# --- the measurement under the reference stack itself (slow) -------------------------------

FIXED = [  # (gold SELECT, result SELECT): every class that reads differently, and its mixes
    *[(gold, result) for gold, result, _ in FLIPS.values()],
    ("SELECT * FROM (VALUES (true, 1), (NULL, 2), (false, NULL)) v(b, n)",
     "SELECT * FROM (VALUES (1, 1.0), (NULL, 2.0), (0, NULL)) v(b, n)"),
    ("SELECT NULL::BOOLEAN AS b", "SELECT NULL::INTEGER AS b"),  # one row, one NULL
    ("SELECT * FROM (VALUES (NULL::BIGINT, NULL::INTEGER)) v(a, b)", "SELECT 1.0 AS a"),
    ("SELECT * FROM (VALUES (1::UBIGINT, 2::UTINYINT), (NULL, 3)) v(a, b)",
     "SELECT * FROM (VALUES (1.0, 2), (NULL, 3)) v(a, b)"),
    ("SELECT * FROM (VALUES (9007199254740993), (NULL)) v(a)",
     "SELECT * FROM (VALUES (9007199254740992.0), (NULL)) v(a)"),
    ("SELECT * FROM (VALUES (INTERVAL 1 HOUR, INTERVAL 2 DAY), (NULL, INTERVAL '-1 day 3 "
     "microseconds')) v(a, b)", "SELECT * FROM (VALUES (3600000000000, 172800000000000), "
     "(NULL, -86399999997000)) v(a, b)"),
    ("SELECT INTERVAL 14 MONTH AS a, 'x' AS s", "SELECT INTERVAL 420 DAY AS a, 'x' AS s"),
    ("SELECT INTERVAL 1 HOUR AS a, 1.5::DOUBLE AS f", "SELECT INTERVAL 60 MINUTE AS a"),
    ("SELECT INTERVAL 400 YEAR AS a", "SELECT INTERVAL 1 DAY AS a"),
    ("SELECT INTERVAL 1 DAY AS a", "SELECT INTERVAL 400 YEAR AS a"),
    ("SELECT * FROM (VALUES (TIME '01:00:00', '8d7c6f5e-0000-4000-8000-000000000001'::UUID, "
     "'x'::BLOB, [1, 2], {'k': 1}), (NULL, NULL, NULL, NULL, NULL)) v(t, u, bl, l, st)",
     "SELECT * FROM (VALUES (TIME '01:00:00', '8d7c6f5e-0000-4000-8000-000000000001'::UUID, "
     "'x'::BLOB, [1, 2], {'k': 1}), (NULL, NULL, NULL, NULL, NULL)) v(t, u, bl, l, st)"),
    ("SELECT * FROM (VALUES (true, INTERVAL 1 HOUR, 5, 'a'), (NULL, NULL, NULL, NULL)) "
     "v(b, i, n, s)", "SELECT * FROM (VALUES (1.0, 'a', 5), (NULL, NULL, NULL)) v(b, s, n)"),
]

LIST_CASES = [  # empty and nested LIST values: numpy < 2.2 takes an empty array as false
    ("SELECT * FROM (VALUES ([]::INTEGER[], 1), ([7], 2), (NULL, 3)) v(l, n)",
     "SELECT * FROM (VALUES ([]::INTEGER[], 1), ([7], 2), (NULL, 3)) v(l, n)"),  # gold itself
    ("SELECT * FROM (VALUES ([]::INTEGER[], 1), ([1], 2), ([], 3)) v(l, n)",
     "SELECT * FROM (VALUES ([5]::INTEGER[], 1), ([1], 2), ([1, 2], 3)) v(l, n)"),
    ("SELECT []::VARCHAR[] AS l, 'x' AS s", "SELECT ['a', 'b']::VARCHAR[] AS l, 'x' AS s"),
    ("SELECT [1, 2] AS l", "SELECT [1, 2] AS l"),  # longer than one: ambiguous, never equal
    ("SELECT [[1], []]::INTEGER[][] AS l, [[]]::INTEGER[][] AS m",
     "SELECT [[1], [2]]::INTEGER[][] AS l, [[3]]::INTEGER[][] AS m"),
    ("SELECT * FROM (VALUES ([[]]::INTEGER[][]), ([[4]]), ([[], [5]])) v(l)",
     "SELECT * FROM (VALUES ([[]]::INTEGER[][]), ([[4]]), ([[], [5]])) v(l)"),
    ("SELECT [[[]]]::INTEGER[][][] AS l, [{'k': 1}] AS st",
     "SELECT [[[9]]]::INTEGER[][][] AS l, [{'k': 1}] AS st"),
    ("SELECT * FROM (VALUES ([]::DOUBLE[], 'a'), ([1.5], 'b')) v(l, s)",
     "SELECT * FROM (VALUES ([2.5]::DOUBLE[], 'a'), ([1.505], 'b')) v(l, s)"),
]
FIXED += LIST_CASES

DIFFERING_TYPES = ["BOOLEAN", "INTEGER", "BIGINT", "SMALLINT", "UBIGINT", "INTERVAL", "DOUBLE",
                   "VARCHAR", "TIME", "DATE"]
"""The classes that read differently, and the neighbours that decide how a frame is typed."""


@st.composite
def differing_cases(draw: st.DrawFn) -> Case:
    """Small tables biased to the classes that read differently, NULLs more often than not."""
    rows = draw(st.integers(1, 5))
    gold = []
    for i in range(draw(st.integers(1, 4))):
        sql_type = draw(st.sampled_from(DIFFERING_TYPES))
        nulls = draw(st.sampled_from(["some", "some", "none", "all"]))
        gold.append(Col(f"c{i}", sql_type, tuple(draw(_column_values(sql_type, nulls, rows)))))
    width = len(gold)
    return Case(gold, _result_table(draw, gold), tuple(draw(_positions(width))),
                draw(_index(width)))


RANDOM_CASES = 250 if FULL_PROPERTIES else 75
"""Tables per strategy (generic and biased), each graded six ways: with the ``dev`` profile
about 5 s of work in all on an idle machine, the ``ci`` profile about three times that."""


def _drawn(strategy: st.SearchStrategy[Case], count: int) -> list[Case]:
    """``count`` examples of ``strategy`` collected in one go (each example costs a table in
    two files, and all of them go to one child process, so no per-example round trip)."""
    found: list[Case] = []

    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def collect(case: Case) -> None:
        found.append(case)

    collect()
    return found


@functools.cache
def _reference_python() -> Path | None:
    try:
        return cached_venv("refstack", REQUIREMENTS, imports=("duckdb", "pandas"))
    except VenvUnavailable as exc:
        pytest.skip(f"reference stack unavailable: {exc}")
    return None


@pytest.mark.slow
def test_values_and_verdicts_equal_those_of_the_reference_stack() -> None:
    """Run upstream's code under duckdb 1.1.3 + pandas 2.2.3 on the same files and compare:
    every value upstream compares (type and repr) and every verdict of six gradings per table.
    Costs a few seconds once the venv exists (building it: about 30 s, once per machine)."""
    python = _reference_python()
    assert python is not None
    drawn = _drawn(cases(), RANDOM_CASES) + _drawn(differing_cases(), RANDOM_CASES)
    with tempfile.TemporaryDirectory() as tmp:
        gold_db, result_db = Path(tmp) / "gold.duckdb", Path(tmp) / "result.duckdb"
        tables: list[dict[str, Any]] = []
        with duckdb.connect(str(gold_db)) as gold, duckdb.connect(str(result_db)) as result:
            for i, (gold_sql, result_sql) in enumerate(FIXED):
                gold.execute(f"CREATE TABLE f{i} AS {gold_sql}")
                result.execute(f"CREATE TABLE f{i} AS {result_sql}")
                tables.append({"name": f"f{i}", "gradings": [[[], True], [[], False],
                                                              [[0], True]],
                               "sql": (gold_sql, result_sql)})
            for i, case in enumerate(drawn):
                create_table(gold, f"h{i}", case.gold)
                create_table(result, f"h{i}", case.result)
                tables.append({"name": f"h{i}", "gradings": [[list(c), o] for c, o in
                                                              case.gradings()],
                               "sql": (case.gold, case.result)})
        job = {"gold": str(gold_db), "result": str(result_db),
               "tables": [{"name": t["name"], "gradings": t["gradings"]} for t in tables]}
        done = subprocess.run([str(python), str(CHILD)], input=json.dumps(job), text=True,
                              capture_output=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert answer["versions"] == REFERENCE_STACK  # really the reference stack
        # numpy < 2.2 is part of it: there an empty array is falsy (LIST values)
        assert Version(answer["versions"]["numpy"]) < Version("2.2")
        flips = _compare(gold_db, result_db, tables, answer["tables"])
        _whole_files(gold_db, result_db, tables, answer["tables"])
    print(f"{len(tables)} tables, {sum(len(t['gradings']) for t in tables)} verdicts equal to "
          f"the reference stack's; {flips} of them differ from the installed duckdb's raw "
          "reading")
    if not duckdb.__version__.startswith("1.1."):  # 1.1 reads as the reference does
        assert flips > 0  # the emulation is exercised, not vacuous


def _compare(gold_db: Path, result_db: Path, tables: list[dict[str, Any]],
             reference: list[dict[str, Any]]) -> int:
    """Assert ours equals the reference table by table (each table read once, graded six
    ways); count the verdicts the installed duckdb's raw reading would have got wrong."""
    flips = 0
    # The raw readings open copies: one process cannot hold a file under two configurations,
    # and ours is locked down (spider2local.db.connect) where the raw one is DuckDB's default.
    raw_gold_db, raw_result_db = (shutil.copy(p, p.with_name("raw-" + p.name))
                                  for p in (gold_db, result_db))
    with Database(gold_db) as gold, Database(result_db) as result, \
            duckdb.connect(str(raw_gold_db), read_only=True) as raw_gold, \
            duckdb.connect(str(raw_result_db), read_only=True) as raw_result:
        for table, theirs in zip(tables, reference, strict=True):
            name, where = table["name"], table["sql"]
            ours = {"gold": gold.read(name, classify=True), "result": result.read(name)}
            for side in ("gold", "result"):
                read, seen = ours[side], theirs[side]
                if "error" in seen:
                    assert read.frame is None, (name, side, seen, where)
                else:
                    assert read.frame is not None, (name, side, read.error, where)
                    assert _typed(read.frame) == seen["values"], (name, side, where)
            gold_frame = ours["gold"].frame
            if theirs["verdicts"] is None or gold_frame is None:  # gold unreadable for both
                continue
            raw_pred = None if ours["result"].frame is None else (
                raw_result.execute(f"SELECT * FROM {name}").fetchdf())
            raw_gold_frame = raw_gold.execute(f"SELECT * FROM {name}").fetchdf()
            for (cols, ignore), expected in zip(table["gradings"], theirs["verdicts"],
                                                strict=True):
                got = score_table(name, gold_frame, ours["result"], cols, ignore,
                                  gold_classes=ours["gold"].classes).passed
                assert got == expected, (name, cols, ignore, where)
                raw_verdict = raw_pred is not None and ref.table_agrees(
                    raw_pred, raw_gold_frame, cols, ignore)
                flips += raw_verdict != expected
    return flips


def _whole_files(gold_db: Path, result_db: Path, tables: list[dict[str, Any]],
                 reference: list[dict[str, Any]]) -> None:
    """The same verdicts through ``score_database`` (opening, reading, scoring), one task whose
    graded tables are the fixed ones, each graded every way."""
    graded = [(t["name"], cols, ignore, expected)
              for t, theirs in zip(tables, reference, strict=True)
              if t["name"].startswith("f") and theirs["verdicts"] is not None
              for (cols, ignore), expected in zip(t["gradings"], theirs["verdicts"],
                                                  strict=True)]
    params = EvalParams("gold.duckdb", tuple(g[0] for g in graded),
                        tuple(tuple(g[1]) for g in graded), tuple(g[2] for g in graded))
    score = score_database(result_db, gold_db, params)
    assert [t.passed for t in score.tables] == [g[3] for g in graded]
