"""The graded tables of a result database, kept in a small DuckDB file of their own.

A trial's whole database is kept only with ``--keep-db``; without it, a scorer fix or a
dataset correction could only be applied by running the trial again. So after the checkpoint
the runner copies exactly the tables the scorer reads (``condition_tabs``) into a new file, each
read as the scorer reads it (:meth:`~spider2local.evaluation.reader.Database.read`: ``SELECT *
FROM <name>``, the name as the dataset writes it, on the result opened untrusted) and stored as
a table: a view is materialised with its rows in the order the scorer got them, and DuckDB
copies every type as it is (ENUM, UUID, INTERVAL, HUGEINT, LIST, STRUCT, MAP, UNION, BIT,
TIMESTAMPTZ keep their type; measured on duckdb 1.5.6), so scoring the copy reads the frames
the scorer read. ``spider2local regrade`` scores these files again.

What that does not cover: a view is the agent's SQL run again, in another connection. One
that reads the clock or ``random()`` gives other rows, and one written to tell the copy apart
(it can see the output database attached beside it in ``duckdb_databases()``) can put in the
copy what the scorer never read. So a regrade of tables is exact; a regrade of an agent's views
is evidence, not proof (the live verdict is the one the run recorded).

A table the scorer cannot read (absent, a broken view) is not in the file and the scorer finds
it missing there too: the same verdict. A name that is not a plain ``table`` or
``schema.table`` (a catalog-qualified one, or more SQL than a name) raises
:class:`NotKeepable`: its copy could not be read back under the same name, so no file is
better than one that would score differently.

Run as ``python -I -m spider2local.sandbox.graded`` inside a reader sandbox that holds the
result read-only and an empty folder of the runner's read-write (the runner's side is
:mod:`spider2local.run.graded`): the views are the agent's SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from spider2local.db.connect import open_database
from spider2local.db.sql import literal, qualified

OUTPUT = "spider2local_graded"
"""The catalog name the new file is attached under while it is written."""


MAX_NAME = 1000
"""Longer graded names are refused before they are parsed: no table is named so, and the
parse of a literal doubling thousands of quotes grows quadratically (2,000,000 quotes: 49 s;
found by review)."""


class NotKeepable(ValueError):
    """A graded name whose copy could not be read back as the scorer reads the original."""


def keep_graded(result: Path, out: Path, tables: Sequence[str]) -> dict[str, str | None]:
    """Write ``tables`` of ``result`` into the new file ``out``; returns, by name, ``None`` for
    a table kept and the one-line reason for one the scorer could not read either.

    Raises :class:`NotKeepable` for a name that is not a plain one (before anything is
    written), and what opening ``result`` raises (the caller keeps no file then)."""
    con = open_database(result, untrusted=True, attach_new={OUTPUT: out})
    try:
        targets = [plain_name(con, name) for name in tables]
        found: dict[str, str | None] = {}
        made: set[tuple[str, str]] = set()
        for name, (schema, table) in zip(tables, targets, strict=True):
            key = (schema.lower(), table.lower())  # DuckDB matches names case-insensitively
            if key in made:  # the same table named twice: kept once
                found[name] = None
                continue
            found[name] = _copy(con, name, schema, table)
            if found[name] is None:
                made.add(key)
        con.execute(f"DETACH {OUTPUT}")
    finally:
        con.close()
    return found


def _copy(con: duckdb.DuckDBPyConnection, name: str, schema: str, table: str) -> str | None:
    try:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {qualified(OUTPUT, schema)}")
        # The name unquoted, as the scorer reads it (case-insensitive, views included).
        con.execute(f"CREATE TABLE {qualified(OUTPUT, schema, table)} AS SELECT * FROM {name}")
    except duckdb.Error as exc:
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0] if text else ''}"
    return None


def plain_name(con: duckdb.DuckDBPyConnection, name: str) -> tuple[str, str]:
    """``(schema, table)`` of a graded name, as DuckDB's own parser reads ``SELECT * FROM
    <name>`` (``main`` when none is given); raises :class:`NotKeepable` for anything but a
    plain ``table`` or ``schema.table``."""
    if len(name) > MAX_NAME:
        raise NotKeepable(f"graded table {name[:40]!r}... is not a table name "
                          f"(over {MAX_NAME} characters)")
    # A literal, not a ``?`` parameter: binding one makes DuckDB's Python module import pandas
    # (to check whether the value is a DataFrame), 0.41 of this child's 0.55 s of CPU
    # (measured, duckdb 1.5.6; the snapshot's reader learnt the same: db/snapshot.py). The
    # parser called by its catalog's name: the agent's database may hold a macro named
    # ``json_serialize_sql`` of its own, which an unqualified call runs instead (it swapped
    # two tables' copies; found by review).
    try:
        row = con.execute("SELECT system.main.json_serialize_sql("
                          f"{literal(f'SELECT * FROM {name}')})").fetchone()
    except duckdb.Error:  # a NUL ends DuckDB's SQL text: the literal is cut, never a name
        raise NotKeepable(f"graded table {name!r} is not a table name") from None
    parsed: Any = json.loads(row[0]) if row and isinstance(row[0], str) else {}
    statements = parsed.get("statements") if isinstance(parsed, dict) else None
    if not isinstance(parsed, dict) or parsed.get("error") or not isinstance(statements, list) \
            or len(statements) != 1 or not isinstance(statements[0], dict):
        raise NotKeepable(f"graded table {name!r} is not a table name")
    node = statements[0].get("node") or {}
    source = node.get("from_table") or {}
    star = node.get("select_list") or []
    plain = (node.get("type") == "SELECT_NODE" and source.get("type") == "BASE_TABLE"
             and not source.get("alias") and not source.get("catalog_name")
             and source.get("sample") is None and source.get("at_clause") is None
             and not source.get("column_name_alias")
             and all(node.get(k) is None for k in ("where_clause", "having", "qualify",
                                                     "sample"))
             and not node.get("modifiers") and not node.get("group_expressions")
             and not (node.get("cte_map") or {}).get("map")
             and len(star) == 1 and star[0].get("type") == "STAR"
             and not star[0].get("columns") and not star[0].get("exclude_list")
             and not star[0].get("replace_list") and not star[0].get("rename_list"))
    if not plain or not source.get("table_name"):
        raise NotKeepable(f"graded table {name!r} is not a plain table or schema.table name")
    return str(source.get("schema_name") or "main"), str(source["table_name"])


def _job(request: dict[str, Any]) -> dict[str, Any]:
    tables = [str(t) for t in request["tables"]]
    return {"tables": keep_graded(Path(request["result"]), Path(request["out"]), tables)}


if __name__ == "__main__":
    from spider2local.sandbox.reply import serve

    serve(_job)
