"""The query tool's policy: one reading statement, decided by DuckDB's own parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spider2local.dbtools.policy import explained, refusal, statement_types, statements


@pytest.mark.parametrize("sql", [
    "SELECT 1",
    "select * from orders limit 5;",
    "  -- look at the data\n  SELECT count(*) FROM orders",
    "/* block; comment */ WITH x AS (SELECT 1) SELECT * FROM x",
    "DESCRIBE orders",
    "SHOW TABLES",
    "PRAGMA table_info('orders')",
    "PRAGMA version",
    "FROM orders",
    "SUMMARIZE orders",
    "VALUES (1, 2)",
    "TABLE orders",
    "(SELECT 1) UNION ALL (SELECT 2)",
    "SELECT 'insert; drop table x' AS note",
    'SELECT "update" FROM t',
    "SELECT $$ DELETE FROM t; $$",
    # Ordinary reads an earlier keyword scan refused:
    "SELECT replace(name, 'a', 'b') FROM t",
    "SELECT * REPLACE (amount * 2 AS amount) FROM orders",
    "SELECT load, set, use, copy, call FROM t",
    "SELECT t.load FROM t WHERE t.set > 1",
    "WITH load AS (SELECT 1 AS set) SELECT set FROM load",
    "EXPLAIN SELECT * FROM orders",
    "EXPLAIN ANALYZE SELECT count(*) FROM orders",
    "EXPLAIN (FORMAT json) SELECT 1",
    "PIVOT orders ON status IN ('a', 'b') USING sum(amount)",
])
def test_reading_statements_pass(sql: str) -> None:
    assert refusal(sql) is None


@pytest.mark.parametrize(("sql", "word"), [
    ("INSERT INTO orders VALUES (1)", "INSERT"),
    ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", "INSERT"),
    ("WITH x AS (SELECT 1) DELETE FROM orders", "DELETE"),
    ("SELECT 1; DROP TABLE orders", "one statement"),
    ("select 1 -- harmless\n; delete from orders", "one statement"),
    ("ATTACH 'other.duckdb' AS o", "ATTACH"),
    ("DETACH o", "DETACH"),
    ("COPY orders TO 'out.csv'", "COPY"),
    ("INSTALL httpfs", "INSTALL"),
    ("LOAD httpfs", "LOAD"),
    ("SET threads = 1", "SET"),
    ("RESET threads", "RESET"),
    ("USE memory", "USE"),
    ("EXPORT DATABASE 'dump'", "EXPORT"),
    ("CALL pragma_version()", "CALL"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("BEGIN", "BEGIN"),
    ("/* SELECT */ CREATE TABLE t AS SELECT 1", "CREATE"),
    ("PRAGMA enable_profiling", "PRAGMA"),
    ("EXPLAIN DELETE FROM orders", "DELETE"),
    ("EXPLAIN ANALYZE DELETE FROM orders", "DELETE"),
    ("/* x */ EXPLAIN -- y\n ANALYZE (FORMAT json) UPDATE t SET a = 1", "UPDATE"),
    ("PIVOT orders ON status USING sum(amount)", "IN (...)"),
    ("SELECT FROM WHERE", "does not parse"),
    ("", "empty"),
    ("  -- only a comment", "empty"),
    ("UPDATE orders SET x = 1", "UPDATE"),
])
def test_writing_or_unsafe_statements_are_refused(sql: str, word: str) -> None:
    reason = refusal(sql)
    assert reason is not None
    assert word.lower() in reason.lower()
    assert "\n" not in reason


def test_the_parser_sees_through_a_cte_to_the_statement_kind() -> None:
    assert statement_types("WITH x AS (SELECT 1) DELETE FROM t") == ["DELETE"]
    assert statement_types("SELECT * REPLACE (1 AS a) FROM t") == ["SELECT"]
    assert statement_types("SELECT 1; SELECT 2") == ["SELECT", "SELECT"]


@pytest.mark.parametrize(("sql", "inner"), [
    ("EXPLAIN SELECT 1", "SELECT 1"),
    ("explain analyse select 1", "select 1"),
    ("EXPLAIN ANALYZE (SELECT 1)", "(SELECT 1)"),
    ("EXPLAIN (FORMAT json, ANALYZE) DELETE FROM t", "DELETE FROM t"),
    ("-- c\nEXPLAIN /* d */ ANALYZE SELECT 2", "SELECT 2"),
    ("EXPLAIN", ""),
])
def test_explained_statement_is_found(sql: str, inner: str) -> None:
    assert explained(sql) == inner


@given(st.text(alphabet="abc ;'\"-*/\n$()", max_size=40))
def test_statement_splitting_never_crashes_and_quotes_hide_semicolons(text: str) -> None:
    parts = statements(text)
    assert all(isinstance(w, str) for part in parts for w in part)
    quoted = "SELECT '" + text.replace("'", "''") + "'"
    assert len(statements(quoted)) == 1
    assert refusal(quoted) is None
    reason = refusal(text)
    assert reason is None or "\n" not in reason
