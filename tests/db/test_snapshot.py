"""Database snapshot: tables and views with columns, types and row counts, even when locked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from spider2local.db import snapshot as snap
from spider2local.db.locks import LockWait
from spider2local.db.snapshot import DbSnapshot
from spider2local.exceptions import DatasetError
from spider2local.sandbox.dbreads import snapshot_database
from tests.helpers import hold_lock

pytestmark = pytest.mark.process


def make_db(path: Path) -> Path:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE orders AS SELECT range AS id, CAST(range * 1.5 AS DOUBLE) AS amount, "
                "DATE '2024-01-01' + CAST(range AS INTEGER) AS day FROM range(7)")
    con.execute("CREATE SCHEMA staging")
    con.execute('CREATE TABLE staging."Odd ""Name""" (x VARCHAR)')
    con.execute("INSERT INTO staging.\"Odd \"\"Name\"\"\" VALUES ('a'), ('b')")
    con.execute("CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 3")
    con.close()
    return path


def test_snapshot_lists_tables_views_columns_and_counts(tmp_path: Path) -> None:
    s = snapshot_database(make_db(tmp_path / "shop.duckdb"))
    assert s.database == "shop.duckdb"
    assert not s.read_from_copy
    assert [(t.schema, t.name, t.kind) for t in s.tables] == [
        ("main", "big_orders", "view"), ("main", "orders", "table"),
        ("staging", 'Odd "Name"', "table")]
    orders = s.table("ORDERS")
    assert orders is not None and orders.rows == 7
    assert [(c.name, c.type) for c in orders.columns] == [
        ("id", "BIGINT"), ("amount", "DOUBLE"), ("day", "DATE")]
    odd = s.table('Odd "Name"', schema="staging")
    assert odd is not None and odd.rows == 2
    view = s.table("big_orders")
    assert view is not None and view.rows is None and len(view.columns) == 3
    assert s.table("orders", schema="staging") is None


def test_snapshot_round_trips_through_json(tmp_path: Path) -> None:
    s = snapshot_database(make_db(tmp_path / "shop.duckdb"))
    assert DbSnapshot.from_json(s.to_json()) == s
    assert str(tmp_path) not in s.to_json()


def test_snapshot_opens_read_only(tmp_path: Path) -> None:
    db = make_db(tmp_path / "shop.duckdb")
    before = db.read_bytes()
    snapshot_database(db)
    assert db.read_bytes() == before
    assert not db.with_name("shop.duckdb.wal").exists()


def test_locked_database_is_read_from_a_copy(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snap, "LOCK_WAIT", LockWait(seconds=0.05, first_delay=0.01))
    db = make_db(tmp_path / "shop.duckdb")
    expected = snapshot_database(db)
    with hold_lock(db):
        with pytest.raises(duckdb.IOException, match="lock"):
            duckdb.connect(str(db), read_only=True)
        s = snapshot_database(db)
    assert s.read_from_copy
    assert s.tables == expected.tables
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.duckdb"]


def test_missing_or_bad_file_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        snapshot_database(tmp_path / "nope.duckdb")
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"not a database at all" * 100)
    with pytest.raises(DatasetError, match=r"bad\.duckdb"):
        snapshot_database(bad)


def test_real_start_databases(shared_dataset: Path) -> None:
    for db in sorted((shared_dataset / "examples").glob("*/*.duckdb")):
        s = snapshot_database(db)
        con = duckdb.connect(str(db), read_only=True)
        try:
            for t in s.tables:
                if t.kind == "table":
                    row = con.execute(f'SELECT count(*) FROM "{t.schema}"."{t.name}"').fetchone()
                    assert row is not None and t.rows == row[0]
            names = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        finally:
            con.close()
        assert {t.name for t in s.tables if t.kind == "table"} == names


def test_quotes_in_schema_table_column_and_path(tmp_path: Path) -> None:
    folder = tmp_path / "o'brien"
    folder.mkdir()
    db = folder / "it's.duckdb"
    con = duckdb.connect(str(db))
    con.execute('CREATE SCHEMA "s""q"')
    con.execute('CREATE TABLE "s""q"."t""x" ("c""1" INTEGER, "it\'s" VARCHAR)')
    con.execute('INSERT INTO "s""q"."t""x" VALUES (1, \'a\'), (2, \'b\'), (3, \'c\')')
    con.close()
    t = snapshot_database(db).table('t"x', schema='s"q')
    assert t is not None and t.rows == 3
    assert [c.name for c in t.columns] == ['c"1', "it's"]


def test_the_snapshot_child_never_imports_pandas(tmp_path: Path) -> None:
    """The snapshot runs in a fresh child per workspace: pandas (imported by DuckDB as soon as
    a ``?`` parameter is bound) would triple its cost. A table of every type family the
    snapshot reads, a view and a quoted schema, so a parameter brought back anywhere shows."""
    db = make_db(tmp_path / "shop.duckdb")
    code = ("import sys; from pathlib import Path; from spider2local.db.snapshot import "
            "read_snapshot; s = read_snapshot(Path(sys.argv[1]), 'shop.duckdb'); "
            "print(len(s.tables), sorted(m for m in ('pandas', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.split() == ["3", "[]"], done.stderr


def test_macros_named_like_the_catalog_functions_list_nothing_false(tmp_path: Path) -> None:
    """The file's own ``duckdb_tables()`` (a table macro listing a table that is not there)
    and ``current_database()`` (naming another database, so nothing would match): the
    snapshot reads the catalog through DuckDB's own functions and lists what is there."""
    honest = snap.read_snapshot(make_db(tmp_path / "shop.duckdb"), "shop.duckdb")
    (tmp_path / "trap").mkdir()
    db = make_db(tmp_path / "trap" / "shop.duckdb")
    con = duckdb.connect(str(db))
    con.execute("CREATE MACRO duckdb_tables() AS TABLE SELECT 'main' AS schema_name, "
                "'invented' AS table_name, 'shop' AS database_name, false AS internal, "
                "false AS temporary")
    con.execute("CREATE MACRO current_database() AS 'elsewhere'")
    con.execute("CREATE MACRO duckdb_columns() AS TABLE SELECT 1 AS nothing")  # under
    con.close()  # information_schema.columns, which broke on it
    found = snap.read_snapshot(db, "shop.duckdb")
    assert isinstance(found, DbSnapshot) and isinstance(honest, DbSnapshot)
    assert [(t.schema, t.name, t.kind, t.rows, t.columns) for t in found.tables] == \
        [(t.schema, t.name, t.kind, t.rows, t.columns) for t in honest.tables]
    assert "invented" not in {t.name for t in found.tables}
