"""Does a gold column equal a result column? Upstream's answer, computed without re-sorting.

Upstream (``vectors_match``): with ``ignore_order`` both columns are sorted on their own by
``(x is None, str(x), isinstance(x, (int, float)))``; then, position by position, two missing
values pass, two numbers pass when ``math.isclose(a, b, abs_tol=0.01)``, anything else must be
``==``; an exception means no match. Facts this module builds on (each checked against the
literal reference by the property tests):

* a missing value never pairs with a present one (NaN vs a number fails isclose, ``pd.NA`` raises,
  None/NaT are ``!=`` everything), so equal missing counts are necessary;
* values of different families (number, string, timestamp) are never equal, so two columns of
  different families match only when both are entirely missing;
* with order ignored, two string columns match exactly when their multisets are equal, and two
  timestamp columns exactly when their sorted values are equal;
* for numbers, identical multisets under the same string form sort identically (a sure match);
  and any match implies the numerically sorted values pair up within the largest tolerance
  (a cheap necessary test). Only pairs passing that test pay for the official string sort.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spider2local.evaluation import official
from spider2local.evaluation.column_types import (
    Array,
    Column,
    NumColumn,
    ObjColumn,
    StrColumn,
    TimeColumn,
)

_REL_TOL = 1e-09
_BOUND_SLACK = 1 + 1e-6


def columns_match(gold: Column, pred: Column, ignore_order: bool) -> bool:
    """Upstream's verdict on one (gold column, result column) pair."""
    if gold.length != pred.length:
        return False
    if gold.length == 0:
        return True
    if isinstance(gold, ObjColumn) or isinstance(pred, ObjColumn):
        return official.lists_match(official_sequence(gold, ignore_order),
                                    official_sequence(pred, ignore_order))
    if gold.n_missing != pred.n_missing:
        return False
    if gold.family != pred.family:
        return gold.all_missing
    if isinstance(gold, NumColumn) and isinstance(pred, NumColumn):
        return _numbers_match(gold, pred, ignore_order)
    if isinstance(gold, StrColumn) and isinstance(pred, StrColumn):
        if ignore_order:
            return gold.same_multiset(pred)
        return bool(np.all(gold.values == pred.values))
    if isinstance(gold, TimeColumn) and isinstance(pred, TimeColumn):
        if ignore_order:
            return bool(np.array_equal(gold.sorted_times.view(np.int64),
                                       pred.sorted_times.view(np.int64)))
        return bool(np.array_equal(gold.times.view(np.int64), pred.times.view(np.int64)))
    raise AssertionError(f"unhandled column families {gold.family}/{pred.family}")


def first_mismatch(gold: Column, pred: Column, ignore_order: bool) -> int | None:
    """First position (in comparison order) where the pair fails, None if it matches.

    Slower than :func:`columns_match` (it always aligns both columns); used for diagnostics
    only, on columns already known not to match.
    """
    if gold.length != pred.length:
        return min(gold.length, pred.length)
    if isinstance(gold, ObjColumn) or isinstance(pred, ObjColumn):
        return official.first_difference(official_sequence(gold, ignore_order),
                                         official_sequence(pred, ignore_order))
    failing = np.flatnonzero(~aligned_ok(gold, pred, ignore_order))
    return int(failing[0]) if len(failing) else None


def aligned_ok(gold: Column, pred: Column, ignore_order: bool) -> Array:
    """Per position, does the pair pass upstream's value rule (typed columns only)?"""
    g_order = gold.official_order if ignore_order else np.arange(gold.length)
    p_order = pred.official_order if ignore_order else np.arange(pred.length)
    g_miss, p_miss = gold.missing[g_order], pred.missing[p_order]
    both_missing = g_miss & p_miss
    present = ~g_miss & ~p_miss
    if isinstance(gold, NumColumn) and isinstance(pred, NumColumn):
        equal = isclose(gold.num[g_order], pred.num[p_order])
    elif isinstance(gold, StrColumn) and isinstance(pred, StrColumn):
        equal = np.asarray(gold.values[g_order] == pred.values[p_order], dtype=bool)
    elif isinstance(gold, TimeColumn) and isinstance(pred, TimeColumn):
        equal = gold.times[g_order] == pred.times[p_order]
    else:
        equal = np.zeros(gold.length, dtype=bool)
    return np.asarray(both_missing | (present & equal), dtype=bool)


def isclose(a: Array, b: Array) -> Array:
    """``math.isclose(a, b, abs_tol=0.01)`` element-wise, with the same float operations."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(b - a)
        within = (diff <= np.abs(_REL_TOL * b)) | (diff <= np.abs(_REL_TOL * a)) | (
            diff <= official.TOLERANCE)
        return np.asarray((a == b) | (np.isfinite(a) & np.isfinite(b) & within), dtype=bool)


def official_sequence(column: Column, ignore_order: bool) -> list[Any]:
    """The Python values upstream compares, sorted its way when order is ignored."""
    return column.sequence(ignore_order)


def _numbers_match(gold: NumColumn, pred: NumColumn, ignore_order: bool) -> bool:
    if gold.infinities != pred.infinities:
        return False
    if ignore_order:
        if _same_multiset_same_order(gold, pred):
            return True
        if not _sorted_within_bound(gold, pred):
            return False
    return bool(np.all(aligned_ok(gold, pred, ignore_order)))


def _same_multiset_same_order(a: NumColumn, b: NumColumn) -> bool:
    """A sure match: the same values, written so that upstream's string sort orders them the
    same way in both columns (then every sorted pair is equal). False means 'not sure'."""
    styles = {a.style, b.style}
    if len(styles) == 1:
        if a.n_missing and a.nan_missing != b.nan_missing:  # bools: '<NA>' first, 'nan' last
            return False
        if a.style == "float":
            if a.has_negative_zero or b.has_negative_zero:  # '-0.0' sorts apart from '0.0'
                return False
            return bool(np.array_equal(a.sorted_present, b.sorted_present))
        return bool(np.array_equal(a.sorted_ints, b.sorted_ints))
    if styles == {"int", "float"}:
        ints, floats = (a, b) if a.style == "int" else (b, a)
        if not floats.integral_below_1e16:
            return False
        return bool(np.array_equal(ints.sorted_ints, floats.sorted_present.astype(np.int64)))
    if "bool" in styles and not (a.n_missing or a.has_negative_zero or b.has_negative_zero):
        # 'False' < 'True' sorts like 0 < 1 ('0' < '1', '0.0' < '1.0'); a missing bool ('<NA>')
        # would sort first instead of last, hence no missing values here.
        return bool(np.all(np.isin(a.sorted_present, (0.0, 1.0)))
                    and np.array_equal(a.sorted_present, b.sorted_present))
    return False


def _sorted_within_bound(a: NumColumn, b: NumColumn) -> bool:
    """Necessary for a match: if some pairing keeps every pair within tolerance, the numeric
    sort pairing does too, under the largest tolerance any pair could have."""
    x, y = a.finite_sorted, b.finite_sorted
    if len(x) != len(y):
        return False
    if not len(x):
        return True
    largest = float(max(abs(x[0]), abs(x[-1]), abs(y[0]), abs(y[-1])))
    bound = max(official.TOLERANCE, _REL_TOL * largest) * _BOUND_SLACK
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.max(np.abs(x - y)) <= bound)
