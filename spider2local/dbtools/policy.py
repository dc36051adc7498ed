"""Which SQL the agent's query tool may run: exactly one reading statement.

The database is opened ``read_only`` with external access off, so safety does not rest on this
check; its job is to decide the statement's *kind* and to answer a refused statement with a clear
reason instead of a DuckDB error. An earlier version refused any statement containing a write
keyword anywhere, which also refused ordinary reads: ``replace(name, 'a', 'b')``,
``SELECT * REPLACE (...)``, columns named ``load`` or ``set``, ``EXPLAIN``.

Two gates, both must pass: the first keyword (after comments and parentheses) is a reading one,
for a clear message; then DuckDB's own parser (``extract_statements``) gives the exact statement
type, which sees through ``WITH x AS (...) DELETE ...`` and tells informational PRAGMAs (rewritten
into SELECTs) from setting ones. ``EXPLAIN`` is checked on the statement it explains, since
``EXPLAIN ANALYZE`` runs it.
"""

from __future__ import annotations

import re

from spider2local.db.parse import MAX_PARSED, SqlTooLong, parse

READING = frozenset({"SELECT", "WITH", "FROM", "VALUES", "DESCRIBE", "DESC", "SHOW",
                     "SUMMARIZE", "PRAGMA", "TABLE", "EXPLAIN", "PIVOT", "UNPIVOT"})
"""First keywords of statements that can only read. Anything else (ATTACH, COPY, INSTALL, LOAD,
SET, EXPORT, CALL, CREATE, ...) is refused before parsing."""
INFO_PRAGMAS = frozenset({"table_info", "show_tables", "show_tables_expanded", "database_list",
                          "storage_info", "show", "version", "database_size", "functions",
                          "platform", "metadata_info"})
EXPLAIN_OPTIONS = frozenset({"ANALYZE", "ANALYSE"})
ALLOWED = "SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN, PRAGMA table_info"

_TOKEN = re.compile(r"""
    (?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>'(?:[^']|'')*(?:'|\Z))
  | (?P<ident>"(?:[^"]|"")*(?:"|\Z))
  | (?P<dollar>\$(?P<tag>[A-Za-z_]*)\$.*?(?:\$(?P=tag)\$|\Z))
  | (?P<semi>;)
  | (?P<word>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)

def statements(sql: str) -> list[list[str]]:
    """Split ``sql`` into statements of upper-cased bare words (comments and quoted text are
    skipped, so a ``;`` or a keyword inside a string or comment never counts; any other token
    is an empty string, which keeps statements with content non-empty)."""
    result: list[list[str]] = [[]]
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup
        if kind == "semi":
            result.append([])
        elif kind == "word":
            result[-1].append(match.group().upper())
        elif kind in ("string", "ident", "dollar", "other") and not match.group().isspace():
            result[-1].append("")
    return [s for s in result if s]


def statement_types(sql: str) -> list[str]:
    """DuckDB's statement types for ``sql`` (``"SELECT"``, ``"EXPLAIN"``, ``"DELETE"``, ...).

    Raises ``duckdb.ParserException`` for SQL DuckDB cannot parse, and
    :class:`~spider2local.db.parse.SqlTooLong` for SQL too long to parse (db/parse.py).
    """
    return [s.type.name for s in parse(sql)]


def explained(sql: str) -> str:
    """The statement an ``EXPLAIN [ANALYZE] [(options)]`` statement explains (its SQL text)."""
    tokens = [m for m in _TOKEN.finditer(sql)
              if m.lastgroup != "comment" and not m.group().isspace()]
    i = 1 if tokens and tokens[0].group().upper() == "EXPLAIN" else 0
    if i < len(tokens) and tokens[i].group().upper() in EXPLAIN_OPTIONS:
        i += 1
    if i < len(tokens) and tokens[i].group() == "(" and _options_follow(sql, tokens[i].end()):
        depth = 1
        while depth and i + 1 < len(tokens):  # skip to the option list's closing parenthesis
            i += 1
            depth += {"(": 1, ")": -1}.get(tokens[i].group(), 0)
        i += 1
    return sql[tokens[i].start():] if i < len(tokens) else ""


def _options_follow(sql: str, pos: int) -> bool:
    """After ``EXPLAIN (``: an option list like ``(FORMAT json)``, not ``(SELECT ...)``."""
    word = re.match(r"\s*([A-Za-z_]+)", sql[pos:])
    return word is not None and word.group(1).upper() not in READING


def refusal(sql: str) -> str | None:
    """Why ``sql`` may not run through the query tool, or None when it is one reading statement."""
    parts = statements(sql)
    if not parts:
        return "empty query: send one SELECT/WITH/DESCRIBE/SHOW statement"
    if len(parts) > 1:
        return "one statement per call: remove the extra ';'-separated statements"
    words = [w for w in parts[0] if w]
    first = words[0] if words else ""
    if first not in READING:
        return (f"{first or 'this statement'} is not allowed: the query tool is read-only "
                f"({ALLOWED}); change data through dbt models instead")
    if first == "PRAGMA" and (len(words) < 2 or words[1].lower() not in INFO_PRAGMAS):
        return "only informational PRAGMAs are allowed (table_info, show_tables, database_list)"
    return _type_refusal(sql, first)


def _type_refusal(sql: str, first: str) -> str | None:
    """The parser's verdict: exactly one statement of type SELECT (or EXPLAIN of one)."""
    import duckdb

    try:
        types = statement_types(sql)
        if types == ["EXPLAIN"]:
            types = statement_types(explained(sql)) or ["EXPLAIN"]
    except duckdb.ParserException as exc:
        return "the SQL does not parse: " + " ".join(str(exc).split())[:300]
    except SqlTooLong:
        return (f"the query is {len(sql)} characters long, more than the {MAX_PARSED} "
                "allowed: send a shorter query")
    if len(types) > 1:
        hint = " (a PIVOT needs its values listed: ON col IN (...))" if "PIVOT" in first else ""
        return f"one statement per call{hint}"
    if types != ["SELECT"]:
        kind = types[0] if types else "this statement"
        return (f"{kind} is not allowed in the query tool (read-only); write models and run "
                "dbt to change the database")
    return None
