"""The official per-value rules, applied literally to Python values.

The fast comparator handles the common column types with numpy; columns of any other type
(TIME, INTERVAL, LIST, BLOB, tz-aware timestamps, years before 1000, ...) fall back to these
functions, which follow upstream's ``vectors_match`` step by step, so every type is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

TOLERANCE = 0.01
"""Upstream's ``abs_tol``; ``rel_tol`` stays at math.isclose's default of 1e-09."""


def sort_key(value: Any) -> tuple[bool, str, bool]:
    """Upstream's sort key: missing-as-None last, then the *string* form, then numbers last."""
    return (value is None, str(value), isinstance(value, (int, float)))


def official_sorted(values: Sequence[Any]) -> list[Any]:
    """Sort as upstream does with ``ignore_order`` (stable, by :func:`sort_key`)."""
    return sorted(values, key=sort_key)


def values_equal(a: Any, b: Any) -> bool:
    """One pair of values, upstream's way. Exceptions propagate (the caller maps them to False)."""
    if pd.isna(a) and pd.isna(b):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), abs_tol=TOLERANCE)
    return not bool(a != b)


def first_difference(gold: Sequence[Any], pred: Sequence[Any]) -> int | None:
    """Index of the first pair that fails (exceptions count as failing), or None if all pass.

    Both sequences must already be in comparison order and of equal length.
    """
    for index, (a, b) in enumerate(zip(gold, pred, strict=True)):
        try:
            if not values_equal(a, b):
                return index
        except Exception:
            return index
    return None


def lists_match(gold: Sequence[Any], pred: Sequence[Any]) -> bool:
    """Upstream's ``vectors_match`` on lists already sorted when order is ignored."""
    if len(gold) != len(pred):
        return False
    return first_difference(gold, pred) is None
