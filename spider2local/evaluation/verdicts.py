"""Result types of scoring: plain frozen data, so the runner can store them as JSON and reload them.

A verdict (``passed``) is always the official one. Everything else here (diagnostics, notes) is
explanation for a human and never changes a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class TaskScore:
    """The official verdict on one task: it passes only when every graded table passes."""

    passed: bool
    tables: tuple[TableScore, ...]
    error: str | None = None
    """Set when the result database could not be opened at all (the task then scores 0)."""

    @property
    def tables_passed(self) -> int:
        return sum(1 for table in self.tables if table.passed)

    @property
    def tables_total(self) -> int:
        return len(self.tables)

