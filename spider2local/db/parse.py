"""DuckDB's own parser, for SQL the runner reads but never runs: whether a model's SQL stops
mid-query (dbtproject.inventory), what kind of statement the agent's query tool was sent
(dbtools.policy). The one owner of the connection that parses.

One in-memory connection for the process, one thread at a time, with no worker threads:
- Not DuckDB's module-level ``duckdb.extract_statements``: under duckdb 1.2.2 concurrent calls to
  it deadlocked the whole process (two ``--jobs 2`` runs of the test suite hung for good in
  workspace preparation; reproduced with three threads).
- Not a connection per thread: each is a database instance of its own, and under ``ulimit -v
  330000`` the second one aborted the process (glibc: "cannot allocate memory for thread-local
  data", exit 127; tests/run/test_memory.py).
- ``threads=1``: by default a connection starts a worker thread per core (about 8 MiB of address
  space each) that parsing never uses; measured by review, 330 MB at 32 cores, where the next
  connection of the run failed for want of memory.

The lock costs nothing a run can see: the parse holds the GIL anyway. But DuckDB's parser is
quadratic on some SQL (a long ``OR`` chain: 0.26 MB in 1.5 s, 1.09 MB in 18.6 s, measured by
review), and that would freeze the event loop of every task at once; so nothing longer than
:data:`MAX_PARSED` is parsed, and each caller says what that means for it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a run that never parses never loads it
    import duckdb

__all__ = ["MAX_PARSED", "SqlTooLong", "parse"]

MAX_PARSED = 100_000
"""Characters. The longest model of Spider2-DBT is a few kilobytes; at this size the worst SQL
found parses in about a quarter of a second."""

_LOCK = threading.Lock()
_CONNECTION: list[duckdb.DuckDBPyConnection] = []


class SqlTooLong(ValueError):
    """SQL longer than :data:`MAX_PARSED`: not parsed."""


def parse(sql: str) -> list[duckdb.Statement]:
    """DuckDB's statements of ``sql``. Raises ``duckdb.ParserException`` for SQL it cannot
    parse and :class:`SqlTooLong` for SQL longer than :data:`MAX_PARSED`."""
    if len(sql) > MAX_PARSED:
        raise SqlTooLong(f"{len(sql)} characters of SQL, more than the {MAX_PARSED} parsed")
    import duckdb

    with _LOCK:
        if not _CONNECTION:
            _CONNECTION.append(duckdb.connect(config={"threads": 1}))
        return _CONNECTION[0].extract_statements(sql)
