"""What a DuckDB file holds: its tables and views, and their columns, as DuckDB's catalog says.

The one owner of that question. Asked of agents' results (the snapshot, the scorer's near-miss
names) and of the dataset's own files (the gold tables dated in ``clock.dates``, the graded
columns the audit lists, the check that an installed file opens), which are untrusted input
too: a task folder comes from anyone.

DuckDB's catalog functions are called by their catalog's name, ``system.main.duckdb_tables()``,
never unqualified and never through ``information_schema``, whose views call them unqualified:
DuckDB resolves an unqualified function to a macro of that name in the file first, so the
file's author would choose the answer (db/connect.py). Before duckdb 1.5.2 even the qualified
call ran the file's table macro (pyproject's pin). Only the file's own database
(``current_database()``): a connection may have others attached (``clock.dates`` attaches
the gold beside a rebuilt project; :func:`~spider2local.db.connect.open_database` attaches any
caller's), whose tables are not the file's. ``dbtools.query`` keeps SQL of its own, with the
same filter: it shows the agent an ``information_schema``-shaped listing, not these records.

No ``?`` parameter: binding one makes DuckDB's Python module import pandas (to check whether
the value is a DataFrame), which tripled a snapshot child's cost (0.35 s to 1.0 s a trial,
measured on duckdb 1.5.6), and these statements need none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import duckdb

__all__ = ["OWN", "Relation", "columns", "relations", "scorer_name"]

OWN = "database_name = system.main.current_database() AND NOT internal"
"""The condition on a catalog function's rows that keeps the file's own objects (also in the
query tool's listing SQL, dbtools/query.py)."""

RELATIONS_SQL = (
    f"SELECT schema_name, table_name, 'table' FROM system.main.duckdb_tables() "
    f"WHERE {OWN} AND NOT temporary UNION ALL SELECT schema_name, view_name, 'view' "
    f"FROM system.main.duckdb_views() WHERE {OWN} AND NOT temporary ORDER BY 1, 2")
COLUMNS_SQL = (
    f"SELECT schema_name, table_name, column_name, data_type FROM system.main.duckdb_columns() "
    f"WHERE {OWN} ORDER BY schema_name, table_name, column_index")


@dataclass(frozen=True)
class Relation:
    """A table or view of the file: ``name`` alone in ``main``, ``schema.name`` elsewhere, is
    how :attr:`display` spells it (dbt's default schema is ``main``)."""

    schema: str
    name: str
    kind: Literal["table", "view"]

    @property
    def display(self) -> str:
        return scorer_name(self.schema, self.name)


def scorer_name(schema: str, name: str) -> str:
    """How the scorer's ``SELECT * FROM <name>`` reaches a relation (evaluation/reader.py): by
    its bare name in ``main``, by ``schema.name`` anywhere else."""
    return name if schema == "main" else f"{schema}.{name}"


def relations(con: duckdb.DuckDBPyConnection) -> list[Relation]:
    """Every table and view of the connection's own database, by schema then name."""
    return [Relation(str(schema), str(name), "view" if kind == "view" else "table")
            for schema, name, kind in con.execute(RELATIONS_SQL).fetchall()]


def columns(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """``(schema, table) -> [(column, type), ...]`` in column order, for every table and view
    of the connection's own database, in one statement."""
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for schema, table, column, kind in con.execute(COLUMNS_SQL).fetchall():
        found.setdefault((str(schema), str(table)), []).append((str(column), str(kind)))
    return found
