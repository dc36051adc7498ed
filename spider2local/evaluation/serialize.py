"""Scores as JSON (how the runner stores them) and as text (what a person reads).

``from_json(to_json(score)) == score`` holds for every score: results written by one run can be
reloaded and re-rendered later without scoring again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spider2local.evaluation.verdicts import ColumnDiagnostic, TableScore, TaskScore


def to_json(score: TaskScore) -> dict[str, Any]:
    """A JSON-ready dict (plain types only). Derived counts are included for readers of the file
    and ignored by :func:`from_json`."""
    return {
        "passed": score.passed,
        "error": score.error,
        "tables_passed": score.tables_passed,
        "tables_total": score.tables_total,
        "tables": [_table_json(table) for table in score.tables],
    }


def _table_json(table: TableScore) -> dict[str, Any]:
    return {
        "name": table.name,
        "passed": table.passed,
        "gold_rows": table.gold_rows,
        "result_rows": table.result_rows,
        "missing": table.missing,
        "error": table.error,
        "notes": list(table.notes),
        "columns": [vars(column).copy() for column in table.columns],
    }


def from_json(data: dict[str, Any]) -> TaskScore:
    """The inverse of :func:`to_json`."""
    tables = tuple(
        TableScore(
            name=t["name"], passed=t["passed"], gold_rows=t["gold_rows"],
            result_rows=t["result_rows"], missing=t["missing"],
            columns=tuple(ColumnDiagnostic(**c) for c in t["columns"]),
            notes=tuple(t["notes"]), error=t["error"])
        for t in data["tables"])
    return TaskScore(passed=data["passed"], tables=tables, error=data["error"])


def render_text(score: TaskScore) -> str:
    """A short report: the verdict, then one line per table and the reasons for failures."""
    verdict = "PASS" if score.passed else "FAIL"
    lines = [f"{verdict}  {score.tables_passed}/{score.tables_total} graded tables pass"]
    if score.error:
        lines.append(f"  error: {score.error}")
    for table in score.tables:
        lines.extend(_table_lines(table))
    return "\n".join(lines)


def table_headline(table: TableScore) -> str:
    """One table's verdict in a phrase (``orders: 10 rows, gold has 12``), without the mark:
    the head of its text report, and what a run's final table notes for a failed task."""
    if table.missing:
        return f"{table.name}: missing from the result"
    if table.result_rows is None:
        return f"{table.name}: cannot be read ({table.error})"
    if table.error:
        return f"{table.name}: {table.error}"
    if table.result_rows != table.gold_rows:
        return f"{table.name}: {table.result_rows} rows, gold has {table.gold_rows}"
    return f"{table.name} ({table.gold_rows} rows)"


def first_diagnostic(table: TableScore) -> str:
    """The first reason a failed table gives: its headline when it says what is wrong (missing,
    unreadable, row counts), else its first column diagnostic."""
    if table.columns and not (table.missing or table.result_rows is None or table.error
                              or table.result_rows != table.gold_rows):
        return f"{table.name}: {column_line(table.columns[0])}"
    return table_headline(table)


def _table_lines(table: TableScore) -> list[str]:
    mark = "PASS" if table.passed else "FAIL"
    lines = [f"  {mark}  {table_headline(table)}"]
    lines.extend(f"        - {column_line(column)}" for column in table.columns)
    lines.extend(f"        note: {note}" for note in table.notes)
    return lines


def column_line(column: ColumnDiagnostic) -> str:
    """One column diagnostic in a line: which gold column, why, and where it first differs."""
    text = f"gold column {column.gold_column!r} (#{column.gold_index}): {column.reason}"
    if column.position is not None:
        text += (f"; first difference at position {column.position}: gold {column.gold_value}"
                 f", result {column.result_value}")
    return text


def failing_tables(score: object) -> tuple[tuple[str, ...], str, str]:
    """The names of the graded tables that failed, the first diagnostic among them, and the
    whole per-table text, from a result's stored ``score`` (all empty when it holds no usable
    per-table score). The one reading of a stored score's failures: the live progress display
    and every report ask it."""
    if not isinstance(score, Mapping):
        return (), "", ""
    try:
        parsed = from_json(dict(score))
    except (KeyError, TypeError, ValueError):  # a hand-edited score: no detail, verdict kept
        return (), "", ""
    failed = [t for t in parsed.tables if not t.passed]
    first = first_diagnostic(failed[0]) if failed else (parsed.error or "")
    return tuple(t.name for t in failed), first, render_text(parsed)
