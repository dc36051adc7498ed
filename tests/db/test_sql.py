"""Quoting: any name and any string survive a round trip through real DuckDB SQL unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spider2local.db.sql import identifier, literal, qualified

# DuckDB's SQL text cannot hold NUL; everything else (quotes, dots, spaces, newlines,
# backslashes, non-ASCII) is fair game for a name an agent or a dataset chose.
TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
ADVERSARIAL = ['"', "'", '""', "a\"b'c", 'x"; DROP TABLE t; --', "o'brien", "\\'", "a.b", " "]


@pytest.fixture(scope="module")
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    c = duckdb.connect()
    yield c
    c.close()


@settings(deadline=None)  # a DuckDB connection per example: timing varies on a busy machine
@given(TEXT)
def test_a_literal_reads_back_as_the_same_text(text: str) -> None:
    with duckdb.connect() as c:
        row = c.execute(f"SELECT {literal(text)}").fetchone()
    assert row == (text,)


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_an_identifier_names_exactly_that_object(con: duckdb.DuckDBPyConnection,
                                                 name: str) -> None:
    con.execute(f"CREATE SCHEMA {identifier(name)}")
    try:
        con.execute(f"CREATE TABLE {qualified(name, name)} ({identifier(name)} INTEGER)")
        con.execute(f"INSERT INTO {qualified(name, name)} VALUES (7)")
        row = con.execute(f"SELECT {identifier(name)} FROM {qualified(name, name)}").fetchone()
        assert row == (7,)
        rows = con.execute("SELECT table_schema, table_name, column_name "
                           "FROM information_schema.columns WHERE table_schema = ?",
                           [name]).fetchall()
        assert rows == [(name, name, name)]
    finally:
        con.execute(f"DROP SCHEMA {identifier(name)} CASCADE")


@settings(deadline=None)
@given(TEXT.filter(bool))
def test_any_identifier_round_trips(name: str) -> None:
    with duckdb.connect() as c:
        c.execute(f"CREATE TABLE {identifier(name)} AS SELECT 1 AS {identifier(name)}")
        assert c.execute("SELECT table_name, column_name FROM information_schema.columns"
                         ).fetchall() == [(name, name)]


def test_a_path_literal_attaches_a_file_whose_path_holds_a_quote(tmp_path: Path,
                                                                 con: duckdb.DuckDBPyConnection
                                                                 ) -> None:
    folder = tmp_path / "o'brien \"data\""
    folder.mkdir()
    db = folder / "it's.duckdb"
    duckdb.connect(str(db)).close()
    con.execute(f"ATTACH {literal(db)} AS other (READ_ONLY)")
    try:
        path = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = 'other'"
                           ).fetchone()
    finally:
        con.execute("DETACH other")
    assert path == (str(db),)
