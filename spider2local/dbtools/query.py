"""Governed read-only access to the task database for the agent: policy, execution, audit.

Why not just let the agent run ``duckdb`` through Bash: a tool can be *governed*. Only one
reading statement passes (:mod:`.policy`); the database is opened ``read_only`` with external
access off, so even a statement the policy missed cannot write or touch other files; results are
cut at a row limit with a note saying so; every call is audited to ``queries.jsonl``.

Queries run in a child process (``python -m spider2local.dbtools.query``) under the
task's fake clock, so ``current_date`` in the agent's queries agrees with what dbt computes. A
file held by a running ``dbt run`` is locked even for readers (DuckDB takes an exclusive lock
for a writer): the child retries with backoff and then says so. No SDK import here:
:mod:`.tools` names these functions as tools, which the Claude session serves in-process and
:mod:`.server` serves over MCP stdio.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from spider2local.core.transcript import MAX_QUERIES, append_capped, fit_line
from spider2local.db import catalog
from spider2local.db.locks import DatabaseLocked, LockWait, retry_on_lock
from spider2local.db.sql import literal
from spider2local.dbtools.policy import refusal, statements

if TYPE_CHECKING:  # the query child imports this module: keep its start light (no anyio/dbt)
    from spider2local.sandbox.readers import ReaderFiles
    from spider2local.workspace.model import Workspace

log = logging.getLogger(__name__)
__all__ = ["QueryLimits", "QueryResult", "QueryService", "refusal", "statements"]


@dataclass(frozen=True)
class QueryResult:
    columns: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    truncated: bool = False
    error: str | None = None
    duration: float = 0.0
    cells_cut: int = 0
    """Cells the child shortened to :data:`MAX_CELL` characters."""

    def render(self, max_cell: int = 200) -> str:
        """The text the agent reads: a pipe table, then a note when rows were cut."""
        if self.error:
            return f"ERROR: {self.error}"
        if not self.columns:
            return "OK (no result set)"
        head = " | ".join(f"{c} ({t})" for c, t in zip(self.columns, self.types, strict=True))
        lines = [head, "-" * min(len(head), 120)]
        lines += [" | ".join(_cell(v, max_cell) for v in row) for row in self.rows]
        count = len(self.rows)
        if self.truncated:
            lines.append(f"[result cut: showing the first {count} rows; more rows exist. "
                         "Add a LIMIT, filter or aggregate (count(*)) to see the rest]")
        else:
            lines.append(f"({count} row{'s' if count != 1 else ''})")
        if self.cells_cut:
            lines.append(f"[{self.cells_cut} cell(s) longer than {MAX_CELL} characters were cut; "
                         "select length(col) or substr(col, start, n) to read them]")
        return "\n".join(lines)


def _cell(value: Any, limit: int) -> str:
    text = "NULL" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def audit(path: Path, tool: str, sql: str, result: QueryResult) -> None:
    """Append one line to ``queries.jsonl``: what ran, how many rows, how long, what failed.
    A disk that refuses the line (full) is logged, never raised into the agent's tool call."""
    line = {"t": round(time.time(), 3), "tool": tool, "sql": sql, "rows": len(result.rows),
            "truncated": result.truncated, "duration": round(result.duration, 3),
            "error": result.error}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        append_capped(path, fit_line(json.dumps(line, default=str)), MAX_QUERIES)
    except OSError as exc:  # a full disk loses the audit line, never the agent's query
        log.warning("%s: query not audited: %s", path, exc.strerror or exc)


MAX_CELL = 2000
"""Characters of one cell the child sends back (the agent sees 200 of them): a 3 MB text cell
used to overflow the child's output and fail the whole query."""
MAX_OUTPUT = 512 * 1024
"""Bytes of rows the child writes before it stops and says the result was cut: well under what
:func:`spider2local.proc.run.run_process` keeps of a child's output."""


def child_command() -> list[str]:
    """``-I`` (isolated mode): the child runs in the agent's project folder, and plain
    ``python -m`` puts that folder first on ``sys.path``; a ``spider2local/`` (or ``json.py``)
    the agent left there would then run as the runner, outside the sandbox (measured)."""
    from spider2local.sandbox.readers import python_module

    return python_module("spider2local.dbtools.query")


def child_request(database: Path, sql: str, max_rows: int, lock_wait: float,
                  root: Path | None = None, start: Path | None = None) -> bytes:
    """``root`` (the workspace root): the database must be a plain file inside it
    (:mod:`spider2local.workspace.guard`), checked by the child right around its open.
    ``start``: the start database's read-only copy to attach as ``start``."""
    return json.dumps({"database": str(database), "sql": sql, "max_rows": max_rows,
                       "lock_wait": lock_wait,
                       "root": None if root is None else str(root),
                       "start": str(start) if start is not None else None}).encode()


START = "start"
"""The catalog name of the start database's read-only copy in every query."""


def _fingerprint(path: Path | None) -> tuple[int, int, int] | None:
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)


def parse_child_output(stdout: str, stderr: str, returncode: int) -> QueryResult:
    """Turn the child's JSON lines (a head, one line per row, an end line) into a result;
    anything else (no end line: the child died midway) becomes a clear error."""
    head: dict[str, Any] = {}
    rows: list[tuple[Any, ...]] = []
    end: dict[str, Any] | None = None
    try:
        for line in stdout.splitlines():
            data = json.loads(line)
            if "row" in data:
                rows.append(tuple(data["row"]))
            elif "end" in data:
                end = data
            else:
                head = data
    except (ValueError, TypeError):
        end = None
    if head.get("error"):
        return QueryResult(error=str(head["error"]))
    if end is None:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return QueryResult(error=f"query process failed (exit {returncode}): {tail}")
    return QueryResult(columns=tuple(head.get("columns", ())), types=tuple(head.get("types", ())),
                       rows=tuple(rows), truncated=bool(end.get("truncated")),
                       cells_cut=int(end.get("cells_cut", 0)))


@dataclass(frozen=True)
class QueryLimits:
    max_rows: int = 200
    """Rows shown per query; enough to eyeball, small enough for the model's context."""
    timeout: float = 60.0
    """Seconds per query, including waits on a locked file."""
    lock_wait: float = 20.0
    """Seconds the child keeps retrying a file locked by dbt before giving up."""


class QueryService:
    """The agent's database tools for one workspace. Every method returns ``(text, is_error)``."""

    def __init__(self, database: Path, env: Mapping[str, str], audit_path: Path,
                 scan_path: Path | None = None, limits: QueryLimits | None = None,
                 root: Path | None = None, start: Path | None = None,
                 project: Path | None = None) -> None:
        self.database = database
        self.root = root
        """The workspace root the database must stay a plain file in (None: not checked)."""
        self.start = start
        """The start database's read-only copy, attached as ``start`` (None: not attached)."""
        self._start_id = _fingerprint(start)
        """Taken before the agent runs: a copy replaced or changed since is not attached (a
        sandboxed agent cannot reach it; an unsandboxed one could)."""
        self.env = dict(env)
        """The child's environment: the workspace env plus the libfaketime preload."""
        self.audit_path = audit_path
        self.scan_path = scan_path
        """The scan taken before the agent started (what its instructions list)."""
        self.project = project
        """The dbt project folder ``project_scan`` re-scans at each call (None: only the
        stored scan is known, e.g. ``mcp-server --database``)."""
        self.limits = limits or QueryLimits()

    @classmethod
    def for_workspace(cls, ws: Workspace, date: dt.date,
                      limits: QueryLimits | None = None) -> QueryService:
        """The service of a workspace: what :class:`~.config.ToolConfig` describes for it
        (the one place that says which files the tools read and log to)."""
        from spider2local.dbtools.config import ToolConfig

        return ToolConfig.for_workspace(ws, date, limits).service(ws.env)

    def start_copy(self) -> Path | None:
        """The copy to attach, when it is still the file made before the agent ran."""
        if self.start is None or self._start_id is None \
                or _fingerprint(self.start) != self._start_id:
            return None
        return self.start

    async def run_sql(self, sql: str, tool: str = "query") -> QueryResult:
        """Policy check, then the child process under the deadline; audited either way."""
        started = time.monotonic()
        reason = refusal(sql)
        result = QueryResult(error=f"refused: {reason}") if reason else await self._child(sql)
        result = replace(result, duration=time.monotonic() - started)
        audit(self.audit_path, tool, sql, result)
        return result

    def reader_files(self) -> ReaderFiles:
        """What the query child's sandbox holds: the workspace (the agent's own files; a
        symlink there resolves inside the sandbox, where nothing of the host is) read-only,
        or without a known workspace the database's folder and the start copy."""
        from spider2local.sandbox.readers import ReaderFiles

        if self.root is not None:
            return ReaderFiles(read_only=(self.root,))
        start = self.start_copy()
        return ReaderFiles(read_only=(self.database.parent,
                                      *(() if start is None else (start.parent,))))

    async def _child(self, sql: str) -> QueryResult:
        from spider2local.sandbox.readers import run_reader

        limits = self.limits
        proc = await run_reader(
            child_command(), self.reader_files(), env=self.env, timeout=limits.timeout,
            input=child_request(self.database, sql, limits.max_rows,
                                min(limits.lock_wait, limits.timeout / 2), self.root,
                                self.start_copy()))
        if proc.timed_out:
            return QueryResult(error=f"the query ran longer than {limits.timeout:.0f} s and was "
                                     "stopped; narrow it (filters, LIMIT, fewer joins)")
        return parse_child_output(proc.stdout, proc.stderr, proc.returncode)

    async def query(self, sql: str) -> tuple[str, bool]:
        result = await self.run_sql(sql)
        return result.render(), result.error is not None

    async def list_tables(self) -> tuple[str, bool]:
        result = await self.run_sql(LIST_TABLES_SQL, tool="list_tables")
        return result.render(), result.error is not None

    async def describe(self, table: str) -> tuple[str, bool]:
        schema, _, name = table.rpartition(".")
        lower = "system.main.lower"
        where = f"{lower}(table_name) = {lower}({literal(name.strip(chr(34)))})"
        if schema:
            where += f" AND {lower}(table_schema) = {lower}({literal(schema.strip(chr(34)))})"
        result = await self.run_sql(DESCRIBE_SQL.format(where=where), tool="describe_table")
        if result.error is None and not result.rows:
            result = replace(result, error=f"no table or view named {table!r}; "
                                           "call list_tables to see what exists")
        return result.render(), result.error is not None

    async def project_scan(self) -> tuple[str, bool]:
        """The project as its files are now (:mod:`.scanner`, in the reader sandbox), so a
        model the agent has written shows as complete; the scan taken before the agent
        started, said to be that, when there is no project to scan or the scan failed.

        Why live: the stored scan listed every model the agent had just written as
        "missing", and nothing in the answer said it was old (a model believes what a tool
        says is current). The answer says which of the two it is, in words, not with a time
        (the MCP server and the in-process tools must answer alike)."""
        failure = None
        if self.project is not None:
            from spider2local.dbtools.scanner import ScanFailed, scan_now

            try:
                return FRESH_SCAN + await scan_now(self.project, self.reader_files(),
                                                   self.limits.timeout), False
            except ScanFailed as exc:
                failure = str(exc)
        if self.scan_path is None or not self.scan_path.is_file():
            return "no project scan is available for this task" + (
                f" (a fresh scan failed: {failure})" if failure else ""), True
        note = STORED_SCAN if failure is None else STORED_SCAN.replace(
            ":\n", f" (a fresh scan failed: {failure}):\n", 1)
        return note + self.scan_path.read_text(encoding="utf-8"), False


FRESH_SCAN = ("Project scan taken now, from the files as they are at this call (models you "
              "have written since the start show as complete; the list in your instructions "
              "is the scan from before you started):\n")
STORED_SCAN = ("Project scan taken before the session started (statuses do not show SQL "
               "written since):\n")


# DuckDB's catalog functions by their catalog's name, and not ``information_schema``: its
# views call ``duckdb_tables()`` and ``duckdb_columns()`` unqualified, which a macro of that
# name in the project's database answers instead (db/connect.py); the file's own objects as
# db/catalog.py keeps them. The columns and their values are information_schema's.
LIST_TABLES_SQL = f"""SELECT schema_name AS table_schema, table_name, 'BASE TABLE' AS table_type,
       estimated_size AS rows
FROM system.main.duckdb_tables()
WHERE {catalog.OWN}
UNION ALL
SELECT schema_name, view_name, 'VIEW', NULL
FROM system.main.duckdb_views()
WHERE {catalog.OWN}
ORDER BY 1, 2"""
DESCRIBE_SQL = f"""SELECT table_schema, table_name, column_name, data_type, is_nullable FROM (
  SELECT schema_name AS table_schema, table_name, column_name, data_type,
         CASE WHEN is_nullable THEN 'YES' ELSE 'NO' END AS is_nullable, column_index
  FROM system.main.duckdb_columns()
  WHERE {catalog.OWN})
WHERE {{where}}
ORDER BY table_schema, table_name, column_index"""


def _cut(value: Any) -> tuple[Any, bool]:
    """A JSON-ready cell, shortened to :data:`MAX_CELL` characters (numbers, booleans and NULL
    as they are)."""
    if value is None or isinstance(value, bool | int | float):
        return value, False
    text = value if isinstance(value, str) else str(value)
    if len(text) <= MAX_CELL:
        return text, False
    return f"{text[:MAX_CELL]}… [{len(text)} characters]", True


def _execute(request: Mapping[str, Any], out: TextIO) -> None:
    """Child side: open read-only (retrying while dbt holds the lock) and write the result as
    JSON lines: the head (columns and types, or an error), one line per row as it is fetched
    (cells cut to :data:`MAX_CELL`), and an end line, stopping at ``max_rows`` or
    :data:`MAX_OUTPUT` bytes. Streaming keeps a wide result from being one line too big to
    read back."""
    import duckdb

    from spider2local.db.connect import open_database
    from spider2local.workspace.guard import OutsideWorkspace, database_files, opened_by_us

    database = Path(request["database"])
    root = Path(request["root"]) if request.get("root") else None

    def emit(data: Mapping[str, Any]) -> int:
        line = json.dumps(data, default=str) + "\n"
        out.write(line)
        return len(line)

    def connect() -> duckdb.DuckDBPyConnection:
        # Locked down by the one owner (temp folder ours, external access off, configuration
        # locked): no ATTACH, file read or setting change gets through, whatever the policy
        # let pass. The start copy is attached before that.
        start = request.get("start")
        return open_database(database, untrusted=True,
                             attach={START: Path(start)} if start else None)

    try:
        if root is not None:
            database_files(root, database)
        con = retry_on_lock(connect, LockWait(seconds=float(request["lock_wait"])))
    except FileNotFoundError:
        emit({"error": f"the task database {database.name} does not exist (dbt creates it; "
                       "was it deleted?)"})
        return
    except OutsideWorkspace as exc:
        emit({"error": f"refused: {exc}"})
        return
    except DatabaseLocked:
        emit({"error": "the database is locked by another process (probably a running "
                       "dbt command); wait for it to finish and query again"})
        return
    except duckdb.Error as exc:  # corrupt, unreadable: say what DuckDB said, at once
        emit({"error": f"cannot open the database: {exc}"})
        return
    if root is not None and opened_by_us(root, database) is False:  # swapped after the check
        con.close()
        emit({"error": f"refused: {database} was replaced while being opened"})
        return
    try:
        cursor = con.execute(request["sql"])
        if cursor.description is None:
            emit({"columns": [], "types": []})
            emit({"end": True})
            return
        emit({"columns": [d[0] for d in cursor.description],
              "types": [str(d[1]) for d in cursor.description]})
        limit, written, cut, count = int(request["max_rows"]), 0, 0, 0
        truncated = False
        while (row := cursor.fetchone()) is not None:
            if count >= limit or written >= MAX_OUTPUT:
                truncated = True
                break
            cells = [_cut(v) for v in row]
            cut += sum(c for _, c in cells)
            written += emit({"row": [v for v, _ in cells]})
            count += 1
        emit({"end": True, "truncated": truncated, "cells_cut": cut})
    except duckdb.Error as exc:
        emit({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        con.close()


def _main() -> None:
    request = json.loads(sys.stdin.read())
    _execute(request, sys.stdout)
    sys.stdout.flush()


if __name__ == "__main__":
    _main()
