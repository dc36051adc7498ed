"""What a file holds, as DuckDB's catalog says: never what the file's own macros say.

Agents' results and the dataset's files are both untrusted. A file may define table macros named
like DuckDB's catalog functions (``duckdb_tables``, ``duckdb_views``, ``duckdb_columns``) and a
``current_database`` of its own; DuckDB resolves an unqualified call (and ``information_schema``'s
views, which call them unqualified) to those. The dataset's side (dates, audit, install) read
``information_schema`` until this test: a gold file then hid its tables from the date
heuristics and broke the audit's graded columns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb

from spider2local.audit.tasks import graded_tables
from spider2local.clock.dates import gold_candidates
from spider2local.dataset.install import open_problem
from spider2local.dataset.load import load_dataset
from spider2local.db.catalog import Relation, columns, relations
from spider2local.suite.load import load_suite
from tests.helpers import make_duckdb

MONTHS = ("select cast(range as date) as m from "
          "range(date '2023-11-01', date '2024-03-01', interval 1 month)")


def _trap(db: Path) -> None:
    """The file's own catalog: every function answers something false (or breaks a caller
    that asks it: a table macro without the columns asked for)."""
    con = duckdb.connect(str(db))
    try:
        for name in ("duckdb_tables", "duckdb_views"):
            con.execute(f"CREATE MACRO {name}() AS TABLE SELECT 'main' AS schema_name, "
                        "'invented' AS table_name, 'invented' AS view_name, "
                        "current_database() AS database_name, false AS internal, "
                        "false AS temporary")
        con.execute("CREATE MACRO duckdb_columns() AS TABLE SELECT 'main' AS schema_name, "
                    "'orders' AS table_name, 'forged' AS column_name, 'INTEGER' AS data_type, "
                    "current_database() AS database_name, false AS internal, "
                    "0 AS column_index")
        con.execute("CREATE MACRO current_database() AS 'elsewhere'")
    finally:
        con.close()


def test_relations_and_columns_are_the_files_whatever_its_macros_and_attachments(
        tmp_path: Path) -> None:
    db = make_duckdb(tmp_path / "shop.duckdb", {"orders": "select 1 as id, 'a' as name"})
    con = duckdb.connect(str(db))
    con.execute("CREATE SCHEMA mart")
    con.execute("CREATE VIEW mart.recent AS SELECT id FROM orders")
    con.close()
    _trap(db)
    other = make_duckdb(tmp_path / "other.duckdb", {"not_ours": "select 1 as x"})
    con = duckdb.connect(str(db), read_only=True)
    con.execute(f"ATTACH '{other}' AS other (READ_ONLY)")
    assert relations(con) == [Relation("main", "orders", "table"),
                              Relation("mart", "recent", "view")]
    assert [r.display for r in relations(con)] == ["orders", "mart.recent"]
    assert columns(con) == {("main", "orders"): [("id", "INTEGER"), ("name", "VARCHAR")],
                            ("mart", "recent"): [("id", "INTEGER")]}
    con.close()


def test_a_gold_files_macros_hide_nothing_from_the_date_heuristics(tmp_path: Path) -> None:
    gold = make_duckdb(tmp_path / "g.duckdb", {"months": MONTHS})
    honest = gold_candidates(gold, ["months"])
    _trap(gold)
    found = gold_candidates(gold, ["months"])
    assert [c.method for c in honest] == ["month-spine"]
    assert found == honest


def test_the_audit_lists_the_gold_columns_not_the_macros(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", gold_tables={"orders": "select 7 as id, 'x' as name"})
    gold = root / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    _trap(gold)
    suite = tmp_path / "suite.toml"
    suite.write_text(f'schema = 1\n[dataset]\nroot = "{root}"\n')
    (task,) = load_dataset(load_suite(suite)).tasks
    (graded,) = graded_tables(task)
    assert (graded.name, graded.in_gold, graded.columns) == ("orders", True, ("id",))
    assert open_problem(gold) is None


def test_the_audit_finds_graded_tables_where_the_scorer_does(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    """The scorer reads ``SELECT * FROM <name>``: a bare name is ``main``'s table, another
    schema's only by its qualified name. A gold ``orders`` only in ``mart`` was listed as in
    gold (with mart's columns) while the scorer could not find it (found by review)."""
    evaluation = {"func": "duckdb_match", "parameters": {
        "gold": "shop.duckdb", "condition_tabs": ["orders", "mart.Orders", "mart.gone"],
        "condition_cols": [[0], [1], [0]], "ignore_orders": [True, True, True]}}
    root = tiny_dataset("t1", evaluation=evaluation, gold_tables={"other": "select 1 as x"})
    gold = root / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    con = duckdb.connect(str(gold))
    con.execute("CREATE SCHEMA mart")
    con.execute("CREATE TABLE mart.orders AS SELECT 1 AS id, 2 AS amount")
    con.close()
    suite = tmp_path / "suite.toml"
    suite.write_text(f'schema = 1\n[dataset]\nroot = "{root}"\n')
    (task,) = load_dataset(load_suite(suite)).tasks
    assert [(g.name, g.in_gold, g.columns) for g in graded_tables(task)] == [
        ("orders", False, ()), ("mart.Orders", True, ("amount",)), ("mart.gone", False, ())]
    con = duckdb.connect(str(gold), read_only=True)
    assert con.execute("SELECT amount FROM mart.Orders").fetchall() == [(2,)]
    con.close()
