"""The governed query tool: the read-only policy, the faked child process, limits, audit."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shutil
import threading
import time
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.dbtools.query import QueryLimits, QueryResult, QueryService, audit
from spider2local.workspace.model import Workspace

FAKE_DATE = dt.date(2024, 3, 17)


def make_workspace(tmp_path: Path, rows: int = 5) -> Workspace:
    project = tmp_path / "project"
    project.mkdir()
    db = project / "shop.duckdb"
    con = duckdb.connect(str(db))
    con.execute(f"CREATE TABLE orders AS SELECT range AS id, range * 2 AS amount "
                f"FROM range({rows})")
    con.execute("CREATE SCHEMA staging")
    con.execute("CREATE VIEW staging.big_orders AS SELECT * FROM main.orders WHERE amount > 4")
    con.close()
    scan = project / ".spider2local" / "scan.json"
    scan.parent.mkdir()
    scan.write_text(json.dumps({"models": [{"name": "orders_summary", "status": "missing"}]}))
    return Workspace(root=tmp_path, project_dir=project, database=db,
                     env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
                     artifacts=tmp_path / "artifacts", scan_path=scan)


def audit_lines(ws: Workspace) -> list[dict[str, object]]:
    path = ws.artifacts / "queries.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.process
def test_queries_run_under_the_fake_clock_with_row_limit_and_audit(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, rows=12)
    service = QueryService.for_workspace(ws, FAKE_DATE, QueryLimits(max_rows=10))

    async def scenario() -> list[tuple[str, bool]]:
        return [await service.query("SELECT current_date AS today"),
                await service.query("SELECT id FROM orders ORDER BY id"),
                await service.query("DELETE FROM orders"),
                await service.query("SELECT * FROM missing_table")]

    (today, is_err), (cut, cut_err), (refused, ref_err), (bad, bad_err) = anyio.run(scenario)
    assert not is_err and "2024-03-17" in today
    assert not cut_err and "result cut: showing the first 10 rows" in cut
    assert "\n9\n" in cut and "\n10\n" not in cut
    assert ref_err and "refused" in refused and "DELETE" in refused
    assert bad_err and "missing_table" in bad
    con = duckdb.connect(str(ws.database), read_only=True)
    assert con.execute("SELECT count(*) FROM orders").fetchone() == (12,)
    con.close()
    lines = audit_lines(ws)
    assert [line["tool"] for line in lines] == ["query"] * 4
    assert [line["rows"] for line in lines] == [1, 10, 0, 0]
    assert [line["truncated"] for line in lines] == [False, True, False, False]
    assert lines[2]["error"] is not None and str(lines[2]["error"]).startswith("refused")
    assert all(isinstance(line["duration"], float) for line in lines)


@pytest.mark.process
def test_ordinary_reads_with_write_words_run(tmp_path: Path) -> None:
    """Reads an earlier keyword scan refused reach the database and answer."""
    ws = make_workspace(tmp_path, rows=3)
    service = QueryService.for_workspace(ws, FAKE_DATE)

    async def scenario() -> list[tuple[str, bool]]:
        return [await service.query("SELECT replace(CAST(id AS VARCHAR), '1', 'one') AS r "
                                    "FROM orders ORDER BY id"),
                await service.query("SELECT * REPLACE (amount * 10 AS amount) FROM orders "
                                    "ORDER BY id"),
                await service.query("SELECT id AS load, amount AS set FROM orders "
                                    "WHERE id = 2"),
                await service.query("EXPLAIN SELECT count(*) FROM orders")]

    (rep, rep_err), (star, star_err), (named, named_err), (plan, plan_err) = anyio.run(scenario)
    assert not rep_err and "\none\n" in rep
    assert not star_err and "\n2 | 40\n" in star
    assert not named_err and "load (BIGINT) | set (BIGINT)" in named and "\n2 | 4\n" in named
    assert not plan_err and "physical_plan" in plan
    assert [line["error"] for line in audit_lines(ws)] == [None] * 4


@pytest.mark.process
def test_list_and_describe(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    service = QueryService.for_workspace(ws, FAKE_DATE)

    async def scenario() -> list[tuple[str, bool]]:
        return [await service.list_tables(), await service.describe("staging.BIG_orders"),
                await service.describe("nope")]

    (tables, t_err), (desc, d_err), (nope, n_err) = anyio.run(scenario)
    assert not t_err and "orders" in tables and "big_orders" in tables and "VIEW" in tables
    assert not d_err and "amount" in desc and "BIGINT" in desc
    assert n_err and "no table or view named 'nope'" in nope
    assert [line["tool"] for line in audit_lines(ws)] == ["list_tables", "describe_table",
                                                          "describe_table"]


@pytest.mark.process
def test_external_access_is_off_even_inside_a_select(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    service = QueryService.for_workspace(ws, FAKE_DATE)
    text, is_error = anyio.run(service.query, f"SELECT * FROM read_csv('{secret}')")
    assert is_error and "disabled" in text


@pytest.mark.process
def test_a_locked_database_is_retried_then_reported(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    service = QueryService.for_workspace(ws, FAKE_DATE, QueryLimits(timeout=4, lock_wait=1.5))
    writer = duckdb.connect(str(ws.database))  # holds the lock, as a running dbt would
    try:
        text, is_error = anyio.run(service.query, "SELECT count(*) FROM orders")
    finally:
        writer.close()
    assert is_error and "locked" in text

    slow = QueryService.for_workspace(ws, FAKE_DATE, QueryLimits(timeout=20, lock_wait=10))
    writer = duckdb.connect(str(ws.database))
    releaser = threading.Timer(1.0, writer.close)
    releaser.start()
    started = time.monotonic()
    text, is_error = anyio.run(slow.query, "SELECT count(*) FROM orders")
    releaser.join()
    assert not is_error and "5" in text
    assert time.monotonic() - started >= 0.9


@pytest.mark.process
def test_a_slow_query_is_stopped_at_its_deadline(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    service = QueryService.for_workspace(ws, FAKE_DATE, QueryLimits(timeout=2))
    started = time.monotonic()
    text, is_error = anyio.run(
        service.query, "SELECT count(*) FROM range(100000000000) a")
    assert is_error and "longer than 2 s" in text
    assert time.monotonic() - started < 8


def test_a_full_disk_loses_the_audit_line_not_the_query() -> None:
    # /dev/full: every write fails with ENOSPC, as on a full disk.
    audit(Path("/dev/full"), "query", "SELECT 1", QueryResult(columns=("x",), rows=((1,),)))


@pytest.mark.process
def test_a_package_the_agent_left_in_the_project_is_not_imported_by_the_child(
        tmp_path: Path) -> None:
    """The child runs in the project folder, outside the sandbox: ``python -m`` would import
    a ``spider2local/`` left there before our own (the agent's code, run as the runner)."""
    ws = make_workspace(tmp_path)
    marker = tmp_path / "ran-outside"
    (ws.project_dir / "spider2local").mkdir()
    (ws.project_dir / "spider2local" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').write('pwned')\n")
    (ws.project_dir / "json.py").write_text(f"open({str(marker)!r}, 'w').write('json')\n")
    service = QueryService.for_workspace(ws, FAKE_DATE)
    text, is_err = anyio.run(service.query, "SELECT count(*) AS n FROM orders")
    assert not marker.exists()
    assert not is_err and "5" in text, text


@pytest.mark.process
def test_a_database_replaced_by_a_link_to_another_file_is_refused(tmp_path: Path) -> None:
    """The agent cannot see gold in its sandbox, but can name it in a symlink: the tool, which
    runs outside, must not follow it (nor a hard link, nor a linked project folder)."""
    ws = make_workspace(tmp_path)
    gold = tmp_path / "gold.duckdb"
    con = duckdb.connect(str(gold))
    con.execute("CREATE TABLE orders AS SELECT 4242 AS id")
    con.close()
    service = QueryService.for_workspace(ws, FAKE_DATE)
    ws.database.unlink()
    ws.database.symlink_to(gold)
    text, is_err = anyio.run(service.query, "SELECT * FROM orders")
    assert is_err and "4242" not in text and "symlink" in text, text
    ws.database.unlink()
    os.link(gold, ws.database)
    text, is_err = anyio.run(service.query, "SELECT * FROM orders")
    assert is_err and "4242" not in text and "hard link" in text, text


@pytest.mark.slow
def test_the_start_database_is_attached_read_only_and_nothing_else_can_be(
        shared_dataset: Path, tmp_path: Path) -> None:
    """On the real task: ``start.<table>`` answers with the database as shipped even after the
    agent's build replaced the table; no other file can be attached, the copy cannot be
    written, and the DuckDB layer refuses the same even when the policy is bypassed."""
    from spider2local.dataset.load import load_dataset
    from spider2local.dbtools.query import _execute, child_request, parse_child_output
    from spider2local.suite.model import Suite
    from spider2local.workspace.environment import START_DIR
    from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace

    task = next(t for t in load_dataset(Suite(path=Path("tasks.toml"),
                                              dataset=shared_dataset)).tasks if t.id == "mrr001")
    assert task.gold is not None
    ws = prepare_workspace(task, artifacts=tmp_path / "artifacts", parent=tmp_path)
    try:
        assert ws.start_copy is not None and ws.start_copy.parent == ws.root / START_DIR
        assert not os.access(ws.start_copy, os.W_OK) or os.geteuid() == 0
        assert ws.start_copy.stat().st_mode & 0o222 == 0
        con = duckdb.connect(str(ws.database))  # what the agent's first dbt run does
        shipped = con.execute("SELECT count(*) FROM mrr").fetchone()
        con.execute("DROP TABLE mrr")
        con.execute("CREATE TABLE mrr AS SELECT 1 AS x")
        con.close()
        service = QueryService.for_workspace(ws, FAKE_DATE)
        gold = str(task.gold.db)

        async def scenario() -> list[tuple[str, bool]]:
            return [await service.query("SELECT count(*) AS n FROM start.mrr"),
                    await service.query("SELECT count(*) AS n FROM mrr"),
                    await service.query(f"ATTACH '{gold}' AS g (READ_ONLY)"),
                    await service.query("INSERT INTO start.mrr SELECT * FROM start.mrr")]

        (old, old_err), (new, _), (attach, attach_err), (_write, write_err) = anyio.run(scenario)
        assert not old_err and f"\n{shipped[0]}\n" in old  # type: ignore[index]
        assert "\n1\n" in new
        assert attach_err and "refused" in attach
        assert write_err

        def raw(sql: str) -> dict[str, object]:  # past the policy, straight to DuckDB
            request = json.loads(child_request(ws.database, sql, 5, 1.0, ws.root, ws.start_copy))
            out = io.StringIO()
            _execute(request, out)
            got = parse_child_output(out.getvalue(), "", 0)
            return {"error": got.error, "rows": [list(r) for r in got.rows]}

        assert "Permission" in str(raw(f"ATTACH '{gold}' AS g (READ_ONLY)")["error"])
        assert "Permission" in str(raw(f"SELECT * FROM '{gold}'")["error"])
        assert raw("SET enable_external_access = true")["error"]
        assert raw("CREATE TABLE start.x AS SELECT 1")["error"]
        assert raw("SELECT count(*) FROM start.mrr")["rows"] == [list(shipped)]  # type: ignore[arg-type]
    finally:
        cleanup_workspace(ws)
    assert not ws.root.exists()


@pytest.mark.process
def test_a_start_copy_replaced_after_the_session_began_is_not_attached(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    start = tmp_path / "start" / "shop.duckdb"
    start.parent.mkdir()
    shutil.copyfile(ws.database, start)
    service = QueryService(ws.database, ws.env, tmp_path / "q.jsonl", start=start)
    assert service.start_copy() == start
    start.unlink()
    con = duckdb.connect(str(start))
    con.execute("CREATE TABLE orders AS SELECT 42 AS id")
    con.close()
    assert service.start_copy() is None
    text, is_error = anyio.run(service.query, "SELECT * FROM start.orders")
    assert is_error and "start" in text


@pytest.mark.process
def test_a_3mb_cell_comes_back_cut_with_a_note(tmp_path: Path) -> None:
    """The child used to send its whole result as one JSON line; a 3 MB cell overflowed what
    is read back and the query failed with "query process failed (exit 0): no output"."""
    ws = make_workspace(tmp_path)
    service = QueryService.for_workspace(ws, FAKE_DATE)

    async def scenario() -> list[tuple[str, bool]]:
        return [await service.query("SELECT 7 AS id, repeat('x', 3000000) AS blob, 'end' AS tail"),
                await service.query("SELECT range AS id, repeat('y', 100000) AS wide "
                                    "FROM range(100)")]
    (one, one_err), (many, many_err) = anyio.run(scenario)
    assert not one_err, one
    assert "7 | xxxx" in one and "| end" in one
    assert "1 cell(s) longer than 2000 characters were cut" in one
    assert len(one) < 5000
    # Many wide rows: cut at the output budget, said so, never a failed query.
    assert not many_err, many[:300]
    assert "cells) longer" in many or "cell(s) longer" in many
    assert "result cut" in many or "(100 rows)" in many
    assert audit_lines(ws)[0]["error"] is None


def test_the_query_log_is_capped_with_a_note(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from spider2local.dbtools import query as dbtools
    monkeypatch.setattr(dbtools, "MAX_QUERIES", 32 * 1024)
    log = tmp_path / "queries.jsonl"
    for i in range(500):
        audit(log, "query", f"SELECT {i}, '{'q' * 200}'", QueryResult(columns=("x",)))
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert log.stat().st_size < 32 * 1024 + 1024
    assert lines[-1]["kind"] == "cut" and sum("kind" in x for x in lines) == 1
    assert lines[0]["sql"].startswith("SELECT 0")


def test_the_listing_and_describe_read_the_catalog_whatever_macros_the_project_made(
        tmp_path: Path) -> None:
    """A project whose database holds a macro named ``current_database`` (a leftover, or the
    agent's own doing) still lists and describes its tables: the tool's SQL calls DuckDB's
    functions by their catalog's name, never information_schema's views, which call them
    unqualified (the listing came back empty, then failed to bind)."""
    from spider2local.dbtools.query import DESCRIBE_SQL, LIST_TABLES_SQL

    con = duckdb.connect(str(tmp_path / "p.duckdb"))
    try:
        con.execute("CREATE TABLE t AS SELECT 1 AS x")
        con.execute("CREATE MACRO current_database() AS 'elsewhere'")
        con.execute("CREATE MACRO duckdb_tables() AS TABLE SELECT 1 AS nothing")
        con.execute("CREATE MACRO duckdb_columns() AS TABLE SELECT 1 AS nothing")
        con.execute("CREATE MACRO lower(x) AS 'nothing'")
        assert con.execute(LIST_TABLES_SQL).fetchall() == [("main", "t", "BASE TABLE", 1)]
        where = "system.main.lower(table_name) = system.main.lower('T')"
        assert con.execute(DESCRIBE_SQL.format(where=where)).fetchall() == [
            ("main", "t", "x", "INTEGER", "YES")]
    finally:
        con.close()
