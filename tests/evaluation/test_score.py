"""score_database on real Spider2-DBT files and on crafted failure cases.

Every verdict is checked against the literal reference (tests/evaluation/reference_scorer.py) as
well as against what the case is built to show. Shared files are never written: they are copied
first.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from spider2local.evaluation import TaskScore, score_database
from spider2local.evaluation.params import EvalParams
from spider2local.exceptions import ScoringError
from tests.evaluation import reference_scorer as ref
from tests.helpers import make_duckdb


def _real_tasks(root: Path) -> list[tuple[str, EvalParams]]:
    lines = (root / "evaluation_suite" / "gold" / "spider2_eval.jsonl").read_text().splitlines()
    tasks = []
    for line in lines:
        entry = json.loads(line)
        p = entry["evaluation"]["parameters"]
        tasks.append((entry["instance_id"], EvalParams(
            p["gold"], tuple(p["condition_tabs"]), tuple(tuple(c) for c in p["condition_cols"]),
            tuple(p["ignore_orders"]))))
    return tasks


def _reference(result: Path, gold: Path, params: EvalParams) -> int:
    return ref.duckdb_match(result, gold, params.condition_tabs, params.condition_cols,
                            params.ignore_orders, ref.read_as_reference_stack)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_real_gold_and_untouched_start_databases_pass(shared_dataset: Path) -> None:
    for tid, params in _real_tasks(shared_dataset):
        gold = shared_dataset / "evaluation_suite" / "gold" / tid / params.gold
        start = shared_dataset / "examples" / tid / params.gold
        before = _digest(gold), _digest(start)
        for result in (gold, start):
            score = score_database(result, gold, params)
            assert score.passed, (tid, result, score)
            assert _reference(result, gold, params) == 1
            assert score.tables_passed == score.tables_total == len(params.condition_tabs)
        assert (_digest(gold), _digest(start)) == before  # opened read-only, never written


def _copy_gold(shared: Path, tid: str, params: EvalParams, tmp_path: Path) -> tuple[Path, Path]:
    gold = shared / "evaluation_suite" / "gold" / tid / params.gold
    copy = tmp_path / f"{tid}_result.duckdb"
    shutil.copyfile(gold, copy)
    return gold, copy


def test_real_dropped_table_scores_zero_and_is_reported_missing(shared_dataset: Path,
                                                                tmp_path: Path) -> None:
    for tid, params in _real_tasks(shared_dataset):
        gold, result = _copy_gold(shared_dataset, tid, params, tmp_path)
        table = params.condition_tabs[0]
        with duckdb.connect(str(result)) as con:
            con.execute(f"ALTER TABLE {table} RENAME TO fct_{table}")
        score = score_database(result, gold, params)
        assert not score.passed and score.error is None
        assert score.tables[0].missing and score.tables[0].result_rows is None
        assert any(f"fct_{table}" in note for note in score.tables[0].notes)
        assert _reference(result, gold, params) == 0


def test_real_value_beyond_tolerance_scores_zero_with_column_diagnostic(
        shared_dataset: Path, tmp_path: Path) -> None:
    # (mrr001's own `mrr` column would not do: its multiset equals previous_month_mrr's, so a
    # changed `mrr` still finds an equal column, upstream and here alike.)
    changed = {"mrr001": "customer_id", "playbook001": "linear_revenue"}
    for tid, params in _real_tasks(shared_dataset):
        gold, result = _copy_gold(shared_dataset, tid, params, tmp_path)
        table, column = params.condition_tabs[0], changed[tid]
        with duckdb.connect(str(result)) as con:
            con.execute(f"UPDATE {table} SET {column} = {column} + 1 WHERE rowid = "
                        f"(SELECT min(rowid) FROM {table} WHERE {column} IS NOT NULL)")
        score = score_database(result, gold, params)
        assert not score.passed
        assert _reference(result, gold, params) == 0
        [diagnostic] = score.tables[0].columns
        assert diagnostic.gold_column == column and diagnostic.nearest == column
        assert diagnostic.position is not None and diagnostic.gold_value != diagnostic.result_value


def test_real_value_within_tolerance_of_an_int_still_passes(shared_dataset: Path,
                                                            tmp_path: Path) -> None:
    """mrr001's customer_id stored as DOUBLE with +0.004: same verdict as upstream (a pass)."""
    tid, params = next(t for t in _real_tasks(shared_dataset) if t[0] == "mrr001")
    gold, result = _copy_gold(shared_dataset, tid, params, tmp_path)
    with duckdb.connect(str(result)) as con:
        con.execute("CREATE OR REPLACE TABLE mrr AS SELECT * REPLACE "
                    "(customer_id::DOUBLE + 0.004 AS customer_id) FROM mrr")
    assert score_database(result, gold, params).passed == bool(_reference(result, gold, params))


def _params(*tables: str, cols: tuple[tuple[int, ...], ...] | None = None,
            orders: tuple[bool, ...] | None = None) -> EvalParams:
    return EvalParams("gold.duckdb", tables, cols or tuple(() for _ in tables),
                      orders or tuple(True for _ in tables))


def test_result_file_that_cannot_be_opened_gives_error_not_exception(tmp_path: Path) -> None:
    gold = make_duckdb(tmp_path / "gold.duckdb", {"orders": "SELECT 1 AS id"})
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"not a database" * 100)
    for result in (garbage, tmp_path / "absent.duckdb"):
        score = score_database(result, gold, _params("orders"))
        assert isinstance(score, TaskScore) and not score.passed and score.error
        assert [t.passed for t in score.tables] == [False]
    assert not (tmp_path / "absent.duckdb").exists()  # read-only: never created


def test_gold_problems_raise_scoring_error(tmp_path: Path) -> None:
    gold = make_duckdb(tmp_path / "gold.duckdb", {"orders": "SELECT 1 AS id"})
    result = make_duckdb(tmp_path / "result.duckdb", {"orders": "SELECT 1 AS id"})
    with pytest.raises(ScoringError, match="absent"):
        score_database(result, tmp_path / "absent.duckdb", _params("orders"))
    with pytest.raises(ScoringError, match="'nope'"):
        score_database(result, gold, _params("nope"))
    with pytest.raises(ScoringError, match="different lengths"):
        score_database(result, gold, EvalParams("g", ("orders",), ((), ()), (True,)))


def test_broken_view_and_out_of_range_columns_score_zero(tmp_path: Path) -> None:
    gold = make_duckdb(tmp_path / "gold.duckdb", {"a": "SELECT 1 AS id", "b": "SELECT 2 AS x"})
    result = make_duckdb(tmp_path / "result.duckdb", {"src": "SELECT 1 AS id",
                                                      "b": "SELECT 2 AS x"})
    with duckdb.connect(str(result)) as con:
        con.execute("CREATE VIEW a AS SELECT * FROM src")
        con.execute("DROP TABLE src")
    params = _params("a", "b", cols=((), (5,)))
    score = score_database(result, gold, params)
    assert [t.passed for t in score.tables] == [False, False]
    assert not score.tables[0].missing and score.tables[0].error
    assert "out of range" in (score.tables[1].error or "")
    assert _reference(result, gold, params) == 0


def test_dates_as_text_fail_but_are_noted(tmp_path: Path) -> None:
    days = "SELECT * FROM (VALUES (DATE '2020-01-01', 1), (DATE '2020-02-01', 2)) v(d, n)"
    gold = make_duckdb(tmp_path / "gold.duckdb", {"t": days})
    result = make_duckdb(tmp_path / "result.duckdb", {"t": f"SELECT d::VARCHAR AS d, n FROM "
                                                           f"({days})"})
    score = score_database(result, gold, _params("t"))
    assert not score.passed and _reference(result, gold, _params("t")) == 0
    table = score.tables[0]
    assert [c.gold_column for c in table.columns] == ["d"]
    assert any("would match result column 'd'" in note for note in table.notes)


def test_row_count_difference_is_reported(tmp_path: Path) -> None:
    gold = make_duckdb(tmp_path / "gold.duckdb", {"t": "SELECT range AS id FROM range(5)"})
    result = make_duckdb(tmp_path / "result.duckdb", {"t": "SELECT range AS id FROM range(4)"})
    table = score_database(result, gold, _params("t")).tables[0]
    assert (table.passed, table.gold_rows, table.result_rows) == (False, 5, 4)


def test_string_sort_quirk_is_reproduced(tmp_path: Path) -> None:
    """Upstream sorts by str(): gold ints 9 and 10 ('10' < '9') against result floats within
    tolerance whose strings sort the other way round fail upstream, so they must fail here."""
    gold = make_duckdb(tmp_path / "gold.duckdb", {
        "t": "SELECT * FROM (VALUES (9, 'a'), (10, 'b')) v(n, s)"})
    result = make_duckdb(tmp_path / "result.duckdb", {
        "t": "SELECT * FROM (VALUES (9.001::DOUBLE, 'a'), (9.999::DOUBLE, 'b')) v(n, s)"})
    params = _params("t")
    assert score_database(result, gold, params).passed is False
    assert _reference(result, gold, params) == 0
    in_order = _params("t", orders=(False,))
    assert score_database(result, gold, in_order).passed is True
    assert _reference(result, gold, in_order) == 1


def test_a_result_view_reading_the_gold_file_by_its_path_does_not_pass(tmp_path: Path) -> None:
    """duckdb reads a table of another DuckDB file named as a string (``FROM 'x.duckdb'``).
    A result's views are the agent's SQL, run by the scorer outside the sandbox: with external
    access on, a view over the gold path made the "table" the gold itself."""
    gold = make_duckdb(tmp_path / "gold" / "shop.duckdb", {"orders": "SELECT 42 AS id"})
    result = tmp_path / "result.duckdb"
    con = duckdb.connect(str(result))
    con.execute(f"CREATE VIEW orders AS SELECT * FROM '{gold}'")
    con.execute("CREATE VIEW secret AS SELECT content FROM read_text('/etc/hostname')")
    con.close()
    params = EvalParams(gold="shop.duckdb", condition_tabs=("orders",), condition_cols=((),),
                        ignore_orders=(True,))
    assert not score_database(result, gold, params).passed


@pytest.mark.parametrize("route", ["file link", "folder link", "relative"])
def test_a_result_reached_through_a_link_scores_as_the_file_itself(
        tmp_path: Path, route: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The library on a linked or relative path: the file's verdict (it was 'cannot open
    result database: DuckDB allows more than the opened files', a 0 for a passing result)."""
    gold = make_duckdb(tmp_path / "gold" / "shop.duckdb", {"orders": "select 1 as id, 'a' as n"})
    real = make_duckdb(tmp_path / "work" / "shop.duckdb", {"orders": "select 'a' as x, 1 as y"})
    params = EvalParams("shop.duckdb", ("orders",), ((),), (True,))
    if route == "file link":
        given = tmp_path / "result.duckdb"
        given.symlink_to(real)
    elif route == "folder link":
        (tmp_path / "linked").symlink_to(real.parent)
        given = tmp_path / "linked" / real.name
    else:
        monkeypatch.chdir(tmp_path)
        given = Path("work") / real.name
    direct = score_database(real, gold, params)
    linked = score_database(given, gold, params)
    assert direct.passed and linked.passed and linked.error is None
    assert linked == direct
    assert _reference(given, gold, params) == 1


def test_the_near_miss_names_are_the_files_tables_whatever_macros_it_holds(
        tmp_path: Path) -> None:
    """The scorer's list of what a result holds (its near-miss notes) reads DuckDB's catalog
    functions by their catalog's name, never information_schema's views, which call them
    unqualified: a result's own ``duckdb_tables()`` macro made that list fail (so: empty)."""
    from spider2local.evaluation.reader import Database

    db = make_duckdb(tmp_path / "result.duckdb", {"orders": "SELECT 1 AS id"})
    con = duckdb.connect(str(db))
    try:
        con.execute("CREATE SCHEMA mart")
        con.execute("CREATE VIEW mart.recent AS SELECT * FROM orders")
        con.execute("CREATE MACRO duckdb_tables() AS TABLE SELECT 'main' AS schema_name, "
                    "'invented' AS table_name, false AS internal")
        con.execute("CREATE MACRO duckdb_views() AS TABLE SELECT 1 AS nothing")
    finally:
        con.close()
    with Database(db, untrusted=True) as result:
        assert result.relation_names() == ["orders", "mart.recent"]  # by schema: main, mart
