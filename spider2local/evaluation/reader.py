"""Read graded tables exactly as upstream does: ``SELECT * FROM <name>`` then ``fetchdf()``.

``fetchdf`` is kept on purpose: the official verdict is defined on the frame it returns (its
dtypes decide every value's Python type, and they change between duckdb versions: duckdb 1.5
returns nullable ``Int64`` where older versions gave floats). Reading the same way keeps verdicts
exact under whatever duckdb 1.x is installed. It does not build a Python object per number or
timestamp; only VARCHAR columns arrive as Python strings, as they would anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import duckdb
import pandas as pd


@dataclass(frozen=True)
class TableRead:
    """One table read from a database: a frame, or why there is none."""

    frame: pd.DataFrame | None
    missing: bool = False
    error: str | None = None


class Database:
    """A DuckDB file opened read-only (never created, never written, never locked for writing).

    ``untrusted`` (an agent's result): external access off. A result's views are the agent's
    SQL, run here by the scorer outside any sandbox; ``SELECT * FROM '<gold>.duckdb'`` in a view
    reads another DuckDB file by its path (duckdb 1.5, measured), so a graded "table" could be
    the gold itself, and ``read_text`` any file of the runner's.
    """

    def __init__(self, path: Path, *, untrusted: bool = False) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such DuckDB file")
        self.path = path
        self._con = duckdb.connect(str(path), read_only=True,
                                   config={"enable_external_access": not untrusted})

    def __enter__(self) -> Database:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()

    def read(self, table: str) -> TableRead:
        """The whole table, or ``missing``/``error`` (never raises for a bad table)."""
        try:
            # Unquoted on purpose, as upstream: case-insensitive, schema-qualified names work.
            frame = self._con.execute(f"SELECT * FROM {table}").fetchdf()
        except duckdb.CatalogException as exc:
            # A view over a dropped table raises the same error: only an absent name is missing.
            return TableRead(None, missing=not self._exists(table), error=_one_line(exc))
        except Exception as exc:  # any failure to read scores the table 0, as upstream
            return TableRead(None, error=_one_line(exc))
        return TableRead(frame)

    def _exists(self, table: str) -> bool:
        wanted = table.lower()
        return any(name.lower() == wanted or name.lower().split(".")[-1] == wanted.split(".")[-1]
                   for name in self.relation_names())

    def relation_names(self) -> list[str]:
        """Every table and view (``schema.name`` outside ``main``), for near-miss notes."""
        try:
            rows = self._con.execute(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "ORDER BY table_schema, table_name").fetchall()
        except duckdb.Error:
            return []
        return [name if schema == "main" else f"{schema}.{name}" for schema, name in rows]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
