"""Scores as text (what a person reads).

As JSON they go through the one codec (:mod:`spider2local.core.codec`): ``load(TaskScore,
dump(score)) == score`` holds for every score, so results written by one run can be reloaded
and re-rendered later without scoring again.
"""

from __future__ import annotations

from spider2local.core.verdicts import (
    ColumnDiagnostic,
    RowDiff,
    TableScore,
    TaskScore,
)


def render_text(score: TaskScore) -> str:
    """A short report: the verdict, then one line per table and the reasons for failures."""
    verdict = "PASS" if score.passed else "FAIL"
    lines = [f"{verdict}  {score.tables_passed}/{score.tables_total} graded tables pass"]
    if score.lenient:
        lenient = sum(1 for table in score.tables if table.lenient)
        lines.append(f"  lenient pass: the official verdict is PASS, but in {lenient} table(s) "
                     "the result's rows do not equal the gold's (row_aligned: false)")
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
    lines = [f"  {mark}  {table_headline(table)}{_aligned_phrase(table)}"]
    lines.extend(f"        - {column_line(column)}" for column in table.columns)
    lines.extend(f"        note: {note}" for note in table.notes)
    if table.row_diff is not None:
        lines.extend("        " + line for line in diff_lines(table.row_diff))
    return lines


def _aligned_phrase(table: TableScore) -> str:
    if not table.passed:
        return ""
    if table.row_aligned is True:
        return "; rows aligned"
    if table.row_aligned is False:
        return "; LENIENT: the rows do not line up (row_aligned: false)"
    return f"; row-aligned check undecided ({table.row_aligned_note})"


def diff_lines(diff: RowDiff) -> list[str]:
    """A row diff as text: the columns, then the missing and the extra rows with their counts;
    a marked cell is shown as ``*value*``."""
    if diff.note:
        return [f"row diff: not computed ({diff.note})"]
    if not diff.missing_total and not diff.extra_total:
        return ["row diff: the same rows as gold (in another order)"]
    pairs = [c if c.split(" (#")[0] == r else f"{c} vs result {r!r}"
             for c, r in zip(diff.columns, diff.result_columns, strict=True)]
    lines = [f"row diff over ({', '.join(pairs)}): {diff.missing_total} gold row(s) missing "
             f"from the result, {diff.extra_total} result row(s) not in gold"]
    for label, rows, total in (("missing", diff.missing, diff.missing_total),
                               ("extra", diff.extra, diff.extra_total)):
        for row in rows:
            cells = ", ".join(f"*{v}*" if k in row.marked else v
                              for k, v in enumerate(row.values))
            times = f" x{row.count}" if row.count > 1 else ""
            lines.append(f"  {'-' if label == 'missing' else '+'} {label}: ({cells}){times}")
        shown = sum(row.count for row in rows)
        if shown < total:
            lines.append(f"    ... and {total - shown} more {label} row(s)")
    return lines


def column_line(column: ColumnDiagnostic) -> str:
    """One column diagnostic in a line: which gold column, why, and where it first differs."""
    text = f"gold column {column.gold_column!r} (#{column.gold_index}): {column.reason}"
    if column.position is not None:
        text += (f"; first difference at position {column.position}: gold {column.gold_value}"
                 f", result {column.result_value}")
    return text


def failing_tables(score: TaskScore | None) -> tuple[tuple[str, ...], str, str]:
    """The names of the graded tables that failed, the first diagnostic among them, and the
    whole per-table text, from a result's stored score (all empty when it holds none). The one
    reading of a stored score's failures: the live progress display and every report ask it."""
    if score is None:
        return (), "", ""
    failed = [t for t in score.tables if not t.passed]
    first = first_diagnostic(failed[0]) if failed else (score.error or "")
    return tuple(t.name for t in failed), first, render_text(score)
