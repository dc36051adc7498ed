"""The official per-value rules, applied literally to Python values.

The fast comparator handles the common column types with numpy; columns of any other type
(TIME, INTERVAL, LIST, BLOB, tz-aware timestamps, years before 1000, ...) fall back to these
functions, which follow upstream's ``vectors_match`` step by step, so every type is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

TOLERANCE = 0.01
"""Upstream's ``abs_tol``; ``rel_tol`` stays at math.isclose's default of 1e-09."""


def sort_key(value: Any) -> tuple[bool, str, bool]:
    """Upstream's sort key: missing-as-None last, then the *string* form, then numbers last."""
    return (value is None, str(value), isinstance(value, (int, float)))


def official_sorted(values: Sequence[Any]) -> list[Any]:
    """Sort as upstream does with ``ignore_order`` (stable, by :func:`sort_key`)."""
    return sorted(values, key=sort_key)


def reference_truth(value: Any) -> bool:
    """``bool(value)`` as numpy < 2.2 (the reference stack's numpy) answers it.

    Upstream compares LIST values, which duckdb hands over as numpy arrays, with ``a != b``
    and takes the truth of the result. Under numpy < 2.2 an empty array is falsy (with a
    DeprecationWarning), so an empty LIST "equals" anything it broadcasts against; numpy 2.2
    made that an error, and the cell never matched (gold against itself failed for 363 of
    6,104 probe cases with LIST columns). A one-element array is its element's truth; a longer
    one raises under both."""
    if isinstance(value, np.ndarray):
        if value.size == 0:
            return False
        if value.size == 1:
            return reference_truth(value.reshape(-1)[0])
        raise ValueError("The truth value of an array with more than one element is "
                         "ambiguous")
    return bool(value)


def _element_ne(a: Any, b: Any) -> bool:
    return reference_truth(reference_ne(a, b))


_OBJECT_NE = np.frompyfunc(_element_ne, 2, 1)


def reference_ne(a: Any, b: Any) -> Any:
    """``a != b`` as numpy < 2.2 computes it. Arrays of objects (nested LIST values) compare
    element by element and take each element's result's truth inside numpy, where an empty
    inner array is falsy there and an error under numpy >= 2.2: done here with
    :func:`reference_truth`, so nested LISTs read as the reference stack reads them. Other
    values compare as they do under any numpy."""
    if any(isinstance(v, np.ndarray) and v.dtype == object for v in (a, b)):
        return np.asarray(_OBJECT_NE(a, b), dtype=bool)
    return a != b


def values_equal(a: Any, b: Any) -> bool:
    """One pair of values, upstream's way. Exceptions propagate (the caller maps them to False).
    Every truth upstream takes implicitly is taken as under the reference stack's numpy
    (:func:`reference_truth`)."""
    if reference_truth(pd.isna(a)) and reference_truth(pd.isna(b)):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), abs_tol=TOLERANCE)
    return not reference_truth(reference_ne(a, b))


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
