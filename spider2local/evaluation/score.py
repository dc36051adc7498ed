"""Score a result database against a gold database: upstream's ``duckdb_match``, exactly.

Upstream: read every graded gold table, then every graded result table (any failure: 0); cut
each gold frame to its ``condition_cols`` (positions; an empty list means all columns); each
remaining gold column must equal SOME column of the result table; a task passes only when every
graded table passes. Upstream stops at the first failing table; this module scores every table
so a report can show all of them (the task verdict is the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from spider2local.core.verdicts import ColumnDiagnostic, RowDiff, TableScore, TaskScore
from spider2local.evaluation import diagnostics, rows
from spider2local.evaluation.column_types import Column
from spider2local.evaluation.columns import frame_columns
from spider2local.evaluation.compare import columns_match
from spider2local.evaluation.params import EvalParams, gold_positions
from spider2local.evaluation.reader import Database, TableRead
from spider2local.evaluation.refstack import reading_note
from spider2local.exceptions import ScoringError


def score_database(result_db: Path, gold_db: Path, params: EvalParams) -> TaskScore:
    """The official verdict with per-table detail. Synchronous (run it in a worker thread).

    Never raises for a bad result: an unreadable table scores 0 with a diagnostic, and a result
    file that cannot be opened gives ``error`` and ``passed=False``. Raises
    :class:`ScoringError` only when the gold side is unusable (then there is nothing to score
    against).
    """
    _check_params(params, gold_db)
    gold_reads = _read_gold(gold_db, params.condition_tabs)
    try:
        reads, relations = _read_result(result_db, params.condition_tabs,
                                        untrusted=not _same_file(result_db, gold_db))
    except _Unopenable as exc:
        tables = tuple(TableScore(name, False, len(gold.frame), None, error=exc.reason)
                       for name, gold in zip(params.condition_tabs, gold_reads, strict=True))
        return TaskScore(False, tables, error=exc.reason)
    tables = tuple(
        score_table(name, gold.frame, read, cols, ignore, relations, gold_classes=gold.classes)
        for name, gold, read, cols, ignore in zip(
            params.condition_tabs, gold_reads, reads, params.condition_cols,
            params.ignore_orders, strict=True))
    return TaskScore(all(table.passed for table in tables), tables)


def score_table(name: str, gold: pd.DataFrame, read: TableRead, cols: Sequence[int],
                ignore_order: bool, relations: Sequence[str] = (), *,
                gold_classes: Sequence[str | None] = ()) -> TableScore:
    """One graded table: upstream's ``compare_pandas_table`` plus diagnostics.

    ``gold_classes`` (per gold column, from :meth:`Database.read` with ``classify``) names the
    columns whose reading differs between the reference stack and newer duckdb; graded ones get
    a note, whatever the verdict.
    """
    if read.frame is None:
        near = tuple(diagnostics.name_notes(name, relations)) if read.missing else ()
        return TableScore(name, False, len(gold), None, missing=read.missing, notes=near,
                          error=read.error)
    pred = read.frame
    try:
        positions = gold_positions(cols, gold.shape[1])
    except IndexError as exc:  # upstream's iloc raises too, and the task then scores 0
        return TableScore(name, False, len(gold), len(pred), error=str(exc))
    gold_columns = frame_columns(gold.iloc[:, positions] if cols else gold)
    pred_columns = frame_columns(pred)
    matches = match_columns(gold_columns, pred_columns, ignore_order)
    passed = all(match is not None for match in matches)
    stack_note = _reading_note(gold, positions, gold_classes)
    if passed:
        check = _row_check(gold_columns, pred_columns, matches, ignore_order)
        diff = None if check.aligned is not False else _row_diff(
            gold_columns, pred_columns, check.mapping or (), positions)
        return TableScore(name, passed, len(gold), len(pred), notes=stack_note,
                          row_aligned=check.aligned, row_aligned_note=check.note,
                          row_diff=diff)
    diff = _row_diff(gold_columns, pred_columns, fallback_mapping(
        gold_columns, pred_columns, matches), positions)
    if len(gold) != len(pred):
        return TableScore(name, passed, len(gold), len(pred), notes=stack_note, row_diff=diff)
    unmatched = [(i, g) for i, (g, m) in enumerate(zip(gold_columns, matches, strict=True))
                 if m is None]
    found: list[ColumnDiagnostic] = []
    notes: list[str] = list(stack_note)
    for i, column in unmatched:
        found.append(diagnostics.column_diagnostic(column, positions[i], pred_columns,
                                                   ignore_order))
        notes.extend(diagnostics.date_notes(column, pred_columns, ignore_order))
    return TableScore(name, False, len(gold), len(pred), columns=tuple(found),
                      notes=tuple(notes), row_diff=diff)


def _row_check(gold: Sequence[Column], pred: Sequence[Column],
               matches: Sequence[int | None], ignore_order: bool) -> rows.RowCheck:
    """The row-aligned check; like every explanation, it can never break a score."""
    try:
        return rows.row_check(gold, pred, matches, ignore_order)
    except Exception as exc:
        return rows.RowCheck(None, f"the row-aligned check failed ({exc!r})")


def _row_diff(gold: Sequence[Column], pred: Sequence[Column], mapping: Sequence[int | None],
              positions: Sequence[int]) -> RowDiff | None:
    try:
        return rows.row_diff(gold, pred, mapping, positions)
    except Exception as exc:
        return RowDiff((), (), (), (), 0, 0, note=f"the row diff failed ({exc!r})")


def fallback_mapping(gold: Sequence[Column], pred: Sequence[Column],
                      matches: Sequence[int | None]) -> list[int | None]:
    """For a failed table: the official match where it found one, else the result column the
    column diagnostics call nearest (same name first), so one wrong cell reads as one missing
    and one extra row."""
    found: list[int | None] = []
    for column, match in zip(gold, matches, strict=True):
        if match is None:
            near = diagnostics.nearest_column(column, pred)
            match = None if near is None else next(j for j, p in enumerate(pred) if p is near)
        found.append(match)
    return found


def match_columns(gold: Sequence[Column], pred: Sequence[Column],
                  ignore_order: bool) -> list[int | None]:
    """For each gold column, the index of a result column equal to it (None if none is).

    The verdict only needs *some* equal column; trying the same-named column first makes the
    usual case (the agent kept the names) one comparison per gold column.
    """
    found: list[int | None] = []
    for column in gold:
        order = sorted(range(len(pred)), key=lambda j: pred[j].name.lower() != column.name.lower())
        found.append(next((j for j in order if columns_match(column, pred[j], ignore_order)),
                          None))
    return found


def _reading_note(gold: pd.DataFrame, positions: Sequence[int],
                  classes: Sequence[str | None]) -> tuple[str, ...]:
    """The note on graded gold columns read differently by other duckdb versions (each column
    once, in table order, even when ``condition_cols`` repeats it)."""
    graded = []
    for i in sorted(set(positions)):
        cls = classes[i] if i < len(classes) else None
        if cls is not None:
            graded.append((str(gold.columns[i]), cls))
    note = reading_note(graded)
    return () if note is None else (note,)


class _Unopenable(Exception):
    """The result file cannot be opened at all (a verdict of 0, not an error of ours)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _read_result(result_db: Path, tables: Sequence[str], *,
                 untrusted: bool = True) -> tuple[list[TableRead], list[str]]:
    """Every graded table of the result (and, if one is missing, the names present); raises
    :class:`_Unopenable` with the reason when the file cannot be opened at all."""
    try:
        result = Database(result_db, untrusted=untrusted)
    except Exception as exc:
        raise _Unopenable(f"cannot open result database {result_db}: {exc}".splitlines()[0]) \
            from exc
    with result:
        reads = [result.read(name) for name in tables]
        relations = result.relation_names() if any(r.missing for r in reads) else []
    return reads, relations


@dataclass(frozen=True)
class _GoldRead:
    frame: pd.DataFrame
    classes: tuple[str | None, ...]


def _read_gold(gold_db: Path, tables: Sequence[str]) -> list[_GoldRead]:
    try:
        gold = Database(gold_db)
    except Exception as exc:
        raise ScoringError(f"{gold_db}: cannot open gold database: {exc}") from exc
    with gold:
        reads = [gold.read(name, classify=True) for name in tables]
    found = []
    for name, read in zip(tables, reads, strict=True):
        if read.frame is None:
            raise ScoringError(f"{gold_db}: gold table {name!r} cannot be read: {read.error}")
        found.append(_GoldRead(read.frame, read.classes))
    return found


def _check_params(params: EvalParams, gold_db: Path) -> None:
    """Upstream asserts these lengths agree (and then scores 0); here it is a dataset defect."""
    sizes = {len(params.condition_tabs), len(params.condition_cols), len(params.ignore_orders)}
    if len(sizes) != 1:
        raise ScoringError(f"{gold_db}: condition_tabs, condition_cols and ignore_orders have "
                           f"different lengths ({len(params.condition_tabs)}, "
                           f"{len(params.condition_cols)}, {len(params.ignore_orders)})")


def _same_file(a: Path, b: Path) -> bool:
    """The gold scored against itself (a dataset check, no agent's file): DuckDB opens one
    file only once per configuration, so it is opened as gold, with the gold's settings."""
    try:
        return a.samefile(b)
    except OSError:
        return False
