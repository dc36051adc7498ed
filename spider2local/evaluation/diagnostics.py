"""Explanations for failures: which result column came closest and where it first differs, plus
lenient notes (a table under a near name, dates that would match as dates).

Nothing here changes a verdict; it runs only after the verdict is known, and only on what failed.
Every function is defensive: a diagnostic that cannot be computed is reported as such instead of
breaking the score.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from spider2local.core.verdicts import ColumnDiagnostic
from spider2local.evaluation.column_types import (
    Array,
    Column,
    NumColumn,
    ObjColumn,
    StrColumn,
    TimeColumn,
)
from spider2local.evaluation.compare import (
    aligned_ok,
    first_mismatch,
    isclose,
    official_sequence,
)

_FAMILY_WORDS = {"num": "numbers", "str": "strings", "time": "timestamps", "obj": "other values"}
_DATE_LIKE = re.compile(r"^\d{4}-\d{2}-\d{2}")
_PREFIX = re.compile(r"^(fct_|fact_|dim_|stg_)")


def column_diagnostic(gold: Column, index: int, preds: Sequence[Column],
                      ignore_order: bool) -> ColumnDiagnostic:
    """Why ``gold`` matched none of ``preds`` (all of the same length as ``gold``)."""
    try:
        return _diagnose(gold, index, preds, ignore_order)
    except Exception as exc:  # explanations must never break a score
        return ColumnDiagnostic(gold.name, index, f"no equal result column ({exc!r} while "
                                "explaining)")


def _diagnose(gold: Column, index: int, preds: Sequence[Column],
              ignore_order: bool) -> ColumnDiagnostic:
    nearest = _nearest(gold, preds)
    if nearest is None:
        kind = _FAMILY_WORDS[gold.family]
        return ColumnDiagnostic(gold.name, index, f"no result column holds {kind}")
    position = first_mismatch(gold, nearest, ignore_order)
    reason = _reason(gold, nearest, ignore_order)
    if position is None:
        return ColumnDiagnostic(gold.name, index, reason, nearest.name)
    return ColumnDiagnostic(gold.name, index, reason, nearest.name, position,
                            _value_text(gold, position, ignore_order),
                            _value_text(nearest, position, ignore_order))


def _nearest(gold: Column, preds: Sequence[Column]) -> Column | None:
    """The same name if present, else the same-family column sharing the most values."""
    for pred in preds:
        if pred.name.lower() == gold.name.lower():
            return pred
    same = [p for p in preds if p.family == gold.family]
    if not same:
        return None
    return max(same, key=lambda p: _similarity(gold, p))


def nearest_column(gold: Column, preds: Sequence[Column]) -> Column | None:
    """The result column a failed gold column is compared with in explanations (row diffs
    too): the same name if present, else the same-family column sharing the most values."""
    try:
        return _nearest(gold, preds)
    except Exception:  # explanations must never break a score
        return None


def _similarity(gold: Column, pred: Column) -> float:
    """Share of values the two columns have in common, ignoring order (cheap, approximate)."""
    if isinstance(gold, NumColumn) and isinstance(pred, NumColumn):
        x, y = gold.finite_sorted, pred.finite_sorted
        size = min(len(x), len(y))
        return float(np.mean(isclose(x[:size], y[:size]))) if size else 0.0
    if isinstance(gold, StrColumn) and isinstance(pred, StrColumn):
        shared = sum((gold.multiset & pred.multiset).values())
        return shared / max(gold.length, 1)
    if isinstance(gold, TimeColumn) and isinstance(pred, TimeColumn):
        return float(np.mean(np.isin(gold.times, pred.times))) if gold.length else 0.0
    return 0.0


def _reason(gold: Column, pred: Column, ignore_order: bool) -> str:
    if gold.n_missing != pred.n_missing:
        return (f"{gold.n_missing} missing value(s) in gold, {pred.n_missing} in result "
                f"column {pred.name!r}")
    if gold.family != pred.family or isinstance(gold, ObjColumn) or isinstance(pred, ObjColumn):
        return f"values differ from result column {pred.name!r}"
    bad = int(np.sum(~aligned_ok(gold, pred, ignore_order)))
    how = "after sorting each column" if ignore_order else "row by row"
    return f"{bad} of {gold.length} values differ from result column {pred.name!r} ({how})"


def _value_text(column: Column, position: int, ignore_order: bool) -> str:
    if isinstance(column, ObjColumn):
        return repr(official_sequence(column, ignore_order)[position])
    row = int(column.official_order[position]) if ignore_order else position
    return column.text(row)


def date_notes(gold: Column, preds: Sequence[Column], ignore_order: bool) -> list[str]:
    """Result columns that would equal ``gold`` if every value were taken as a calendar date
    (DATE vs TIMESTAMP with a time part, text dates, tz-aware timestamps)."""
    gold_days = _as_days(gold)
    if gold_days is None:
        return []
    notes = []
    for pred in preds:
        pred_days = _as_days(pred)
        if pred_days is None or len(pred_days) != len(gold_days):
            continue
        if _same_days(gold_days, pred_days, ignore_order):
            notes.append(f"column {gold.name!r} would match result column {pred.name!r} if "
                         "dates and timestamps were compared as calendar dates")
    return notes


def _as_days(column: Column) -> Array | None:
    try:
        if isinstance(column, TimeColumn):
            return column.times.astype("datetime64[D]")
        if isinstance(column, StrColumn | ObjColumn) and not column.all_missing:
            values = pd.Series(column.official_values(), dtype=object)
            if not _DATE_LIKE.match(str(values[~column.missing].iloc[0])):
                return None
            parsed = pd.to_datetime(values, errors="coerce", format="mixed", utc=True)
            if int(parsed.isna().sum()) != column.n_missing:
                return None
            return np.asarray(parsed.dt.tz_localize(None).to_numpy().astype("datetime64[D]"))
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    return None


def _same_days(a: Array, b: Array, ignore_order: bool) -> bool:
    if ignore_order:
        a, b = np.sort(a), np.sort(b)
    return bool(np.array_equal(a.view(np.int64), b.view(np.int64)))


def name_notes(table: str, relations: Sequence[str]) -> list[str]:
    """Relations whose name differs from a missing graded table only by case, schema or a
    fct_/fact_/dim_/stg_ prefix: worth telling, never graded."""
    wanted = table.split(".")[-1].lower()
    core = _PREFIX.sub("", wanted)
    notes = []
    for relation in relations:
        short = relation.split(".")[-1].lower()
        if short == wanted or _PREFIX.sub("", short) == core:
            notes.append(f"table {table!r} is missing, but the result has {relation!r} "
                         "(not graded under that name)")
    return notes
