"""Quote names and strings for DuckDB SQL: the one place that escapes what goes into a statement.

Table and column names come from databases the agent or the dataset wrote, and paths from the
user's disk: any of them may hold a quote. Interpolated bare, ``"`` in a name or ``'`` in a path
breaks the statement (or changes it). Parameters (``?``) are used wherever DuckDB accepts them;
names and the path of ``ATTACH`` cannot be parameters, so they go through these helpers.
"""

from __future__ import annotations

import os

__all__ = ["identifier", "literal", "qualified"]


def identifier(name: str) -> str:
    """``name`` as a quoted identifier (``"`` doubled): any text names exactly that object.

    DuckDB matches quoted identifiers case-insensitively too, so quoting never changes which
    object a plain name resolves to.
    """
    return '"' + name.replace('"', '""') + '"'


def qualified(*parts: str) -> str:
    """A dotted name (``"schema"."table"``), every part quoted on its own."""
    return ".".join(identifier(part) for part in parts)


def literal(text: str | os.PathLike[str]) -> str:
    """``text`` (or a path) as a string literal (``'`` doubled). DuckDB's standard strings take
    backslashes literally, so a doubled quote is the only escape needed."""
    return "'" + os.fspath(text).replace("'", "''") + "'"
