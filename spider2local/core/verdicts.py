"""Result types of scoring: plain frozen data, so the runner can store them as JSON and reload them.

They live in core (not in :mod:`spider2local.evaluation`, which computes them) because a
result record holds its task's score typed (:attr:`spider2local.core.results.TaskResult.score`)
and core is below every stage. As JSON they go through :mod:`.codec`; the derived properties
(``tables_passed``, ``lenient``...) are written beside the fields for readers of the file and
recomputed when read.

A verdict (``passed``) is always the official one. Everything else here (diagnostics, notes) is
explanation for a human and never changes a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from spider2local.core.codec import derived, tolerant


@tolerant
@dataclass(frozen=True)
class ColumnDiagnostic:
    """Why one graded gold column found no equal result column."""

    gold_column: str
    gold_index: int
    """Position of the column in the gold table (what ``condition_cols`` names)."""
    reason: str
    """One short sentence, e.g. ``"3 of 120 values differ from result column 'x'"``."""
    nearest: str | None = None
    """The result column that came closest (same name first, else most equal values)."""
    position: int | None = None
    """First position that differs in the official comparison order: the row when row order
    matters, the rank in the official sort order when it does not."""
    gold_value: str | None = None
    result_value: str | None = None


@tolerant
@dataclass(frozen=True)
class DiffRow:
    """One distinct row of a row diff: its values as text, over the graded gold columns."""

    values: tuple[str, ...]
    count: int
    """How many times the row is missing (or extra)."""
    marked: tuple[int, ...] = ()
    """Cells that differ from the closest row on the other side of the diff."""


@tolerant
@dataclass(frozen=True)
class RowDiff:
    """Gold rows missing from the result and result rows not in gold, as multisets over the
    graded columns under the column mapping (see :mod:`.rows`)."""

    columns: tuple[str, ...]
    """The graded gold columns, ``name (#position)``."""
    result_columns: tuple[str, ...]
    """The result column each gold column was compared with."""
    missing: tuple[DiffRow, ...]
    """The first distinct gold rows the result lacks (up to 20)."""
    extra: tuple[DiffRow, ...]
    """The first distinct result rows gold lacks (up to 20)."""
    missing_total: int
    extra_total: int
    note: str | None = None
    """Why the diff could not be computed (then both sides are empty)."""


@derived("lenient")
@tolerant
@dataclass(frozen=True)
class TableScore:
    """The verdict on one graded table, with enough detail to see why it failed."""

    name: str
    passed: bool
    gold_rows: int
    result_rows: int | None
    """None when the table could not be read from the result."""
    missing: bool = False
    """The result has no table (or view) of this name."""
    columns: tuple[ColumnDiagnostic, ...] = ()
    """One entry per graded gold column without an equal result column."""
    notes: tuple[str, ...] = ()
    """Lenient observations (near-miss names, dates that would match if unified); they never
    change a verdict."""
    error: str | None = None
    """Why the table could not be read or compared at all (it then scores 0)."""
    row_aligned: bool | None = None
    """Beside the verdict, never replacing it: do the result's rows, over the columns the
    official match paired, equal the gold's rows (:mod:`.rows`)? None when the official verdict
    failed or the check could not be decided (:attr:`row_aligned_note` says why). A pass with
    False is a *lenient pass*."""
    row_aligned_note: str | None = None
    row_diff: RowDiff | None = None
    """For a table that fails, officially or row-aligned: which rows differ."""

    @property
    def lenient(self) -> bool:
        """An official pass whose rows do not line up (the verdict stays a pass)."""
        return self.passed and self.row_aligned is False


@derived("tables_passed", "tables_total", "row_aligned", "lenient")
@tolerant
@dataclass(frozen=True)
class TaskScore:
    """The official verdict on one task: it passes only when every graded table passes."""

    passed: bool
    tables: tuple[TableScore, ...]
    error: str | None = None
    """Set when the result database could not be opened at all (the task then scores 0)."""

    @property
    def lenient(self) -> bool:
        """An official pass with at least one lenient table (the verdict stays a pass)."""
        return self.passed and any(table.lenient for table in self.tables)

    @property
    def row_aligned(self) -> bool | None:
        """The task's row-aligned verdict: every table's, None if one is undecided or the
        official verdict failed."""
        if not self.passed:
            return None
        if any(table.row_aligned is False for table in self.tables):
            return False
        if any(table.row_aligned is None for table in self.tables):
            return None
        return True

    @property
    def tables_passed(self) -> int:
        return sum(1 for table in self.tables if table.passed)

    @property
    def tables_total(self) -> int:
        return len(self.tables)

