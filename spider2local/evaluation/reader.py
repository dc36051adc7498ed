"""Read graded tables exactly as upstream does: ``SELECT * FROM <name>`` then ``fetchdf()``.

``fetchdf`` is kept on purpose: the official verdict is defined on the frame it returns (its
dtypes decide every value's Python type). Those dtypes changed between duckdb versions (duckdb
1.5 returns nullable ``Int64`` where 1.1 gave floats), so every frame is then converted to the
dtypes of the reference stack, duckdb 1.1.3 (:mod:`.refstack`): verdicts are those of the
benchmark's era under whatever duckdb 1.x is installed. Reading this way does not build a Python
object per number or timestamp; only VARCHAR columns arrive as Python strings, as they would
anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import duckdb
import pandas as pd

from spider2local.db import catalog
from spider2local.db.connect import open_database
from spider2local.evaluation.refstack import UnreadableInterval, differing_classes, reference_frame
from spider2local.proc.watchdog import watched


@dataclass(frozen=True)
class TableRead:
    """One table read from a database: a frame, or why there is none."""

    frame: pd.DataFrame | None
    missing: bool = False
    error: str | None = None
    classes: tuple[str | None, ...] = ()
    """Per column (when asked for): the class of values whose reading differs between the
    reference stack and newer duckdb (see :func:`.refstack.differing_classes`), or None."""


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
        # DuckDB refuses a second connection to one file with another configuration (the
        # gold scored against itself): the caller opens that one as gold, trusted.
        # watched: a view that never finishes is interrupted at the scoring stage's deadline
        self._con = watched(open_database(path, untrusted=untrusted))

    def __enter__(self) -> Database:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()

    def read(self, table: str, *, classify: bool = False) -> TableRead:
        """The whole table as the reference stack reads it, or ``missing``/``error`` (never
        raises for a bad table). ``classify`` also names the columns whose reading differs
        between stacks (one extra ``DESCRIBE``; asked for gold tables only, for notes)."""
        try:
            # Unquoted on purpose, as upstream: case-insensitive, schema-qualified names work.
            raw = self._con.execute(f"SELECT * FROM {table}").fetchdf()
            frame = reference_frame(raw)
        except duckdb.CatalogException as exc:
            # A view over a dropped table raises the same error: only an absent name is missing.
            return TableRead(None, missing=not self._exists(table), error=_one_line(exc))
        except UnreadableInterval as exc:  # duckdb 1.1.3 fails to read it: so does upstream
            return TableRead(None, error=str(exc))
        except Exception as exc:  # any failure to read scores the table 0, as upstream
            return TableRead(None, error=_one_line(exc))
        if not classify:
            return TableRead(frame)
        return TableRead(frame, classes=tuple(differing_classes(self._types(table), raw)))

    def _types(self, table: str) -> list[str]:
        """DuckDB's type name of every column, by position (the same under every version,
        unlike ``fetchdf`` dtypes or the cursor's description); [] if it cannot be told."""
        try:
            rows = self._con.execute(f"DESCRIBE SELECT * FROM {table}").fetchall()
        except duckdb.Error:
            return []
        return [str(row[1]) for row in rows]

    def _exists(self, table: str) -> bool:
        wanted = table.lower()
        return any(name.lower() == wanted or name.lower().split(".")[-1] == wanted.split(".")[-1]
                   for name in self.relation_names())

    def relation_names(self) -> list[str]:
        """Every table and view (``schema.name`` outside ``main``), for near-miss notes."""
        try:
            return [rel.display for rel in catalog.relations(self._con)]
        except duckdb.Error:
            return []


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
