"""Why a trial did not pass, in one word: its ``failure_class``, decided from its result alone.

Every class is decided from evidence result.json already holds (status, error kind and message,
the integrity mark, the per-table score), first match wins, in this order (docs/scoring.md):
the machine's or the harness's fault before the agent's, the agent's stop reasons before what
its database shows, and among the tables the coarsest failure first. A trial that passed, or
that has no gold to score against, has no class.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from spider2local.core.verdicts import TableScore, TaskScore


class FailureClass(StrEnum):
    INFRASTRUCTURE = "infrastructure"
    """The machine's fault (error kind ``infrastructure``): never the agent's verdict."""
    HARNESS_ERROR = "harness_error"
    """An unexpected exception in one of spider2local's stages (error kind ``exception``)."""
    NOT_SCORED = "not_scored"
    """Gold, evaluation record or scorer changed since the run started (kind ``integrity``)."""
    SUSPECT = "suspect"
    """The integrity scan marked the trial suspect."""
    BUDGET = "budget"
    """The run's or the task's budget ended the session."""
    TURN_LIMIT = "turn_limit"
    TIMEOUT = "timeout"
    AGENT_ERROR = "agent_error"
    """The agent failed or crashed, or left a database that cannot be scored."""
    NO_DATABASE = "no_database"
    """The result database could not be opened at all."""
    TABLE_MISSING = "table_missing"
    """A graded table is absent from the result."""
    TABLE_ERROR = "table_error"
    """A graded table exists but cannot be read (a broken view, an iloc out of range)."""
    ROW_COUNT = "row_count"
    """Every graded table is there, but one has another number of rows than gold."""
    WRONG_VALUES = "wrong_values"
    """Same row counts; some graded gold column has no equal result column (the detail names
    them as ``table.column``)."""


def classify(*, passed: bool | None, status: str, error_kind: str | None,
             error_message: str | None, integrity: str | None, cut_by_budget: bool,
             score: TaskScore | None) -> tuple[FailureClass | None, str]:
    """(class, detail) of a trial, from its result's fields; (None, "") when it passed or
    has nothing to be scored against."""
    if passed or status == "unscored":
        return None, ""
    message = (error_message or "").lower()
    if error_kind == "infrastructure":
        return FailureClass.INFRASTRUCTURE, error_message or ""
    if error_kind == "exception":
        return FailureClass.HARNESS_ERROR, error_message or ""
    if error_kind == "integrity":
        return FailureClass.NOT_SCORED, error_message or ""
    if integrity == "suspect":
        return FailureClass.SUSPECT, ""
    if cut_by_budget or "budget limit" in message:
        return FailureClass.BUDGET, error_message or ""
    if "turn limit" in message:
        return FailureClass.TURN_LIMIT, error_message or ""
    if status == "timeout" or error_kind == "timeout":
        return FailureClass.TIMEOUT, error_message or ""
    if error_kind == "agent":
        return FailureClass.AGENT_ERROR, error_message or ""
    return _from_score(score)


def _from_score(score: TaskScore | None) -> tuple[FailureClass | None, str]:
    if score is None:
        return FailureClass.NO_DATABASE, "no per-table score"
    if score.error:
        return FailureClass.NO_DATABASE, score.error
    failed = [t for t in score.tables if not t.passed]
    tests: tuple[tuple[FailureClass, Callable[[TableScore], bool]], ...] = (
        (FailureClass.TABLE_MISSING, lambda t: t.missing),
        (FailureClass.TABLE_ERROR, lambda t: t.result_rows is None or bool(t.error)),
        (FailureClass.ROW_COUNT, lambda t: t.result_rows != t.gold_rows))
    for cls, test in tests:
        found = [t.name for t in failed if test(t)]
        if found:
            return cls, ", ".join(found)
    return FailureClass.WRONG_VALUES, ", ".join(f"{t.name}.{c.gold_column}" for t in failed
                                                for c in t.columns)
