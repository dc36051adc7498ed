"""Rows kept together: the row-aligned check beside the official verdict, and row diffs.

The official match pairs each gold column with some result column on its own and, with
``ignore_order``, sorts every column separately, so a result whose graded columns are shuffled
independently passes although no row is right. This module asks the stricter question: under the
column mapping the official match found (each gold column to a result column equal to it; with
several candidates, any assignment that works), do the result's rows, restricted to the mapped
columns, equal the gold's rows, as a multiset with ``ignore_order`` and in order without it,
value by value with the official rules (abs 0.01 / rel 1e-9 for numbers, missing equals missing,
the reference stack's reading)? It never changes a verdict.

How it stays exact and fast (no Python object per value on the usual types): every (gold column,
result column) pair becomes integer codes such that equal codes mean equal values. Strings and
timestamps are exact, so their codes are factorized values. Numbers are compared with a
tolerance, which is not transitive: the sorted distinct values of both columns are cut where two
neighbours cannot be within tolerance of each other (no value left of a cut is close to one
right of it), and each piece is one code. A piece whose extremes are within the absolute (or,
same sign, relative) tolerance holds values all pairwise equal, and its code is exact; a wider
piece (a chain of near-equal values) and literal columns (TIME, LIST, ...) only give a necessary
code, and rows with equal necessary codes are then compared pair by pair and matched as a
bipartite graph (scipy's maximum matching): a perfect matching exists exactly when the multisets
are equal under the official rules. The same matching, maximum instead of perfect, gives the
smallest row diff.
"""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from spider2local.core.verdicts import DiffRow, RowDiff
from spider2local.evaluation import official
from spider2local.evaluation.column_types import (
    Array,
    Column,
    NumColumn,
    ObjColumn,
    StrColumn,
    TimeColumn,
)
from spider2local.evaluation.compare import columns_match, isclose

MAX_MAPPINGS = 256
"""Column assignments tried before the check is called undecided (each costs one row match)."""
MAX_PAIRS = 4_000_000
"""Row pairs compared one by one (chains of near-equal numbers, literal columns) before the
check is called undecided."""
SHOWN_ROWS = 20
"""Rows of each side a diff shows (with their counts)."""

_REL_TOL = 1e-09
_SLACK = 1 + 1e-6
_SAFE_LITERALS = (str, bytes, dt.date, dt.time, dt.timedelta, uuid.UUID)
"""Literal values for which ``==`` is the official rule and agrees with ``hash`` (datetime and
pd.Timestamp/Timedelta are subclasses of these); numbers, arrays and the rest are compared pair
by pair instead."""


class Undecided(Exception):
    """The check cannot be decided within its limits; the message says why."""


@dataclass(frozen=True)
class PairCodes:
    """One (gold column, result column) pair as integer codes (0: missing)."""

    gold: Array
    pred: Array
    exact: bool
    """Equal codes mean equal values. False: equal codes are only necessary, and rows are
    compared with :attr:`check` pair by pair."""
    check: Callable[[Array, Array], Array] | None = None
    """Element-wise official equality of gold rows ``i`` and result rows ``j``."""


@dataclass(frozen=True)
class RowCheck:
    """The row-aligned verdict on one officially passing table."""

    aligned: bool | None
    note: str | None = None
    """Why ``aligned`` is None (undecided), or how it was decided when it says something."""
    mapping: tuple[int, ...] | None = None
    """The result column of each gold column under which the check was decided (the first
    assignment tried when no assignment keeps the rows together)."""


def pair_codes(gold: Column, pred: Column) -> PairCodes:
    """Codes for one pair; equal codes are equal values when ``exact``."""
    if isinstance(gold, ObjColumn) or isinstance(pred, ObjColumn):
        return _literal_codes(gold, pred)
    if gold.family != pred.family:
        # Values of different families never compare equal; only missing matches missing.
        return PairCodes(np.where(gold.missing, 0, 1), np.where(pred.missing, 0, 2), True)
    if isinstance(gold, NumColumn) and isinstance(pred, NumColumn):
        return _number_codes(gold, pred)
    if isinstance(gold, StrColumn) and isinstance(pred, StrColumn):
        return _string_codes(gold, pred)
    if isinstance(gold, TimeColumn) and isinstance(pred, TimeColumn):
        both = np.concatenate([gold.times.view(np.int64), pred.times.view(np.int64)])
        codes = np.asarray(pd.factorize(both)[0], dtype=np.int64) + 1
        codes[np.concatenate([gold.missing, pred.missing])] = 0
        return _split(codes, gold.length)
    raise AssertionError(f"unhandled column families {gold.family}/{pred.family}")


def _split(codes: Array, at: int, exact: bool = True,
           check: Callable[[Array, Array], Array] | None = None) -> PairCodes:
    return PairCodes(codes[:at], codes[at:], exact, check)


def _string_codes(gold: StrColumn, pred: StrColumn) -> PairCodes:
    """Strings keyed by their hashes (already computed by the official multiset test) when no
    hash stands for two different strings, within or across the columns; else by value."""
    mine, theirs = gold.hash_table(), pred.hash_table()
    if mine is not None and theirs is not None:
        _, i, j = np.intersect1d(mine[0], theirs[0], assume_unique=True, return_indices=True)
        if bool(np.all(mine[2][i] == theirs[2][j])):
            missing = np.concatenate([gold.missing, pred.missing])
            codes = np.zeros(len(missing), dtype=np.int64)
            hashes = np.concatenate([gold.present_hashes, pred.present_hashes])
            codes[~missing] = np.asarray(pd.factorize(hashes)[0], dtype=np.int64) + 1
            return _split(codes, gold.length)
    codes, _ = pd.factorize(np.concatenate([gold.values, pred.values]))
    return _split(np.asarray(codes, dtype=np.int64) + 1, gold.length)


def _number_codes(gold: NumColumn, pred: NumColumn) -> PairCodes:
    values = np.concatenate([gold.num, pred.num])
    missing = np.concatenate([gold.missing, pred.missing])
    codes = np.zeros(len(values), dtype=np.int64)
    codes[~missing & (values == np.inf)] = 1
    codes[~missing & (values == -np.inf)] = 2
    finite = ~missing & np.isfinite(values)
    whole = values[finite]
    if not len(whole) or (np.all(whole == np.floor(whole)) and np.abs(whole).max() < 1e8):
        # Whole numbers under 1e8: distinct ones differ by at least 1, beyond both
        # tolerances (0.01, and 1e-9 of 1e8), so every value is its own exact code.
        if len(whole):
            codes[finite] = (whole - whole.min()).astype(np.int64) + 3
        return _split(codes, gold.length)
    # Hash the values first and sort only the distinct ones (cheaper than sorting every row).
    factor, uniques = pd.factorize(values[finite])
    order = np.argsort(uniques)
    distinct = np.asarray(uniques)[order]
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    exact = True
    if len(distinct):
        low, high = distinct[:-1], distinct[1:]
        with np.errstate(over="ignore", invalid="ignore"):
            # Neighbours stay together when the official rule calls them equal; where the
            # relative tolerance could matter (values of 5e6 and more), also when they are
            # within it up to rounding, so that no value left of a cut is close to one right.
            relative = _REL_TOL * np.maximum(np.abs(low), np.abs(high))
            loose = ((high - low) <= np.maximum(official.TOLERANCE, relative) * _SLACK) & (
                relative >= official.TOLERANCE / 2)
            linked = isclose(low, high) | loose
        piece = np.concatenate([[0], np.cumsum(~linked)]).astype(np.int64)
        starts = np.flatnonzero(np.concatenate([[True], ~linked]))
        ends = np.concatenate([starts[1:], [len(distinct)]]) - 1
        first, last = distinct[starts], distinct[ends]
        with np.errstate(over="ignore", invalid="ignore"):
            span = last - first
            smaller = np.minimum(np.abs(first), np.abs(last))
            tight = (span <= official.TOLERANCE) | (
                (first * last > 0) & (span <= _REL_TOL * smaller))
        exact = bool(np.all(tight))
        codes[finite] = piece[rank[np.asarray(factor, dtype=np.int64)]] + 3
    check = None if exact else _number_check(gold, pred)
    return _split(codes, gold.length, exact, check)


def _number_check(gold: NumColumn, pred: NumColumn) -> Callable[[Array, Array], Array]:
    def check(i: Array, j: Array) -> Array:
        g_miss, p_miss = gold.missing[i], pred.missing[j]
        equal = isclose(gold.num[i], pred.num[j])
        return np.asarray((g_miss & p_miss) | (~g_miss & ~p_miss & equal), dtype=bool)
    return check


def _literal_codes(gold: Column, pred: Column) -> PairCodes:
    """Upstream's Python values; hashable plain values get exact codes, anything else (numbers
    among objects, arrays) is compared pair by pair with the literal rule."""
    g_values, p_values = gold.official_values(), pred.official_values()
    missing = np.concatenate([gold.missing, pred.missing])
    table: dict[object, int] = {}
    codes = np.zeros(len(missing), dtype=np.int64)
    for index, value in enumerate(itertools.chain(g_values, p_values)):
        if missing[index]:
            continue
        if not isinstance(value, _SAFE_LITERALS):
            return _split(np.zeros(len(missing), dtype=np.int64), gold.length, False,
                          _literal_check(g_values, p_values))
        codes[index] = table.setdefault(value, len(table) + 1)
    return _split(codes, gold.length)


def _literal_check(g_values: list[object], p_values: list[object]
                   ) -> Callable[[Array, Array], Array]:
    def equal(a: object, b: object) -> bool:
        try:
            return official.values_equal(a, b)
        except Exception:  # upstream: an exception means no match
            return False

    def check(i: Array, j: Array) -> Array:
        return np.fromiter((equal(g_values[a], p_values[b]) for a, b in
                            zip(i.tolist(), j.tolist(), strict=True)), dtype=bool, count=len(i))
    return check


def _row_keys(pairs: Sequence[PairCodes]) -> tuple[Array, Array]:
    """One integer per row (gold, result) that is equal exactly when every pair's codes are."""
    n_gold = len(pairs[0].gold) if pairs else 0
    n_pred = len(pairs[0].pred) if pairs else 0
    keys = np.zeros(n_gold + n_pred, dtype=np.int64)
    size = 1
    for pair in pairs:
        codes = np.concatenate([pair.gold, pair.pred])
        width = int(codes.max()) + 1 if len(codes) else 1
        if size * width >= 2**62:  # re-number before the combined key could overflow
            keys = np.asarray(pd.factorize(keys)[0], dtype=np.int64)
            size = int(keys.max()) + 1 if len(keys) else 1
        keys = keys * width + codes
        size *= width
    return keys[:n_gold], keys[n_gold:]


def unmatched_rows(pairs: Sequence[PairCodes]) -> tuple[Array, Array]:
    """Gold rows and result rows left over by a largest one-to-one pairing of equal rows (over
    the pairs' columns): both empty exactly when the rows are equal as multisets.

    Raises :class:`Undecided` when more than :data:`MAX_PAIRS` row pairs would need comparing.
    """
    gold_keys, pred_keys = _row_keys(pairs)
    n_gold = len(gold_keys)
    ids, _ = pd.factorize(np.concatenate([gold_keys, pred_keys]))
    ids = np.asarray(ids, dtype=np.int64)
    g_ids, p_ids = ids[:n_gold], ids[n_gold:]
    groups = int(ids.max()) + 1 if len(ids) else 0
    g_count = np.bincount(g_ids, minlength=groups)
    p_count = np.bincount(p_ids, minlength=groups)
    inexact = [pair for pair in pairs if not pair.exact]
    if not inexact:
        return _surplus(g_ids, g_count - p_count), _surplus(p_ids, p_count - g_count)
    return _matched_rows(g_ids, p_ids, g_count, p_count, inexact)


def _surplus(ids: Array, surplus: Array) -> Array:
    """The last ``surplus[g]`` rows of every group ``g`` with a positive surplus (rows of one
    group are all equal to each other, so which ones does not matter)."""
    if not len(ids) or not np.any(surplus > 0):
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    counts = np.bincount(ids, minlength=len(surplus))
    ends = np.cumsum(counts)
    rank_from_end = ends[sorted_ids] - np.arange(len(ids))  # 1 for a group's last row
    take = rank_from_end <= np.maximum(surplus, 0)[sorted_ids]
    return np.sort(order[take])


def _matched_rows(g_ids: Array, p_ids: Array, g_count: Array, p_count: Array,
                  inexact: Sequence[PairCodes]) -> tuple[Array, Array]:
    """Rows equal by their codes are candidates; the inexact pairs decide each candidate pair,
    and a maximum bipartite matching pairs the rows."""
    edges_per = g_count * p_count
    total = int(edges_per.sum())
    if total > MAX_PAIRS:
        raise Undecided(f"{total:,} row pairs would need comparing one by one (limit "
                        f"{MAX_PAIRS:,}: near-equal numbers chained within the tolerance, or "
                        "values compared literally)")
    g_order, p_order = np.argsort(g_ids, kind="stable"), np.argsort(p_ids, kind="stable")
    g_start = np.concatenate([[0], np.cumsum(g_count)[:-1]])
    p_start = np.concatenate([[0], np.cumsum(p_count)[:-1]])
    group = np.repeat(np.arange(len(edges_per)), edges_per)
    offset = np.concatenate([[0], np.cumsum(edges_per)[:-1]])
    local = np.arange(total) - offset[group]
    width = np.maximum(p_count[group], 1)
    gi = g_order[g_start[group] + local // width]
    pj = p_order[p_start[group] + local % width]
    keep = np.ones(total, dtype=bool)
    for pair in inexact:
        assert pair.check is not None
        if np.any(keep):
            keep[keep] = pair.check(gi[keep], pj[keep])
    gi, pj = gi[keep], pj[keep]
    n_gold, n_pred = len(g_ids), len(p_ids)
    # Imported here, where the rare tolerance-chain case needs it, not at module level: every
    # scoring imports this module, and scipy's import costs time and, under a memory limit
    # (ulimit -v), made OpenBLAS spin on a failed mmap so the scorer never finished (measured:
    # tests/run/test_memory.py timed out). External library, no cycle involved.
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching

    graph = csr_matrix((np.ones(len(gi), dtype=np.int8), (gi, pj)), shape=(n_gold, n_pred))
    partner = maximum_bipartite_matching(graph, perm_type="column")
    gold_left = np.flatnonzero(partner < 0)
    matched = np.zeros(n_pred, dtype=bool)
    matched[partner[partner >= 0]] = True
    return gold_left, np.flatnonzero(~matched)


def rows_equal(gold: Sequence[Column], pred: Sequence[Column], mapping: Sequence[int],
               ignore_order: bool) -> bool:
    """Do the result's rows over ``mapping`` equal the gold's rows (multiset or in order)?"""
    chosen = [pred[j] for j in mapping]
    if not ignore_order:
        # In order, equal rows are equal columns position by position: the official ordered
        # match already keeps rows together.
        return all(columns_match(g, p, False) for g, p in zip(gold, chosen, strict=True))
    if gold and gold[0].length != chosen[0].length:
        return False
    pairs = [pair_codes(g, p) for g, p in zip(gold, chosen, strict=True)]
    gold_left, pred_left = unmatched_rows(pairs)
    return not len(gold_left) and not len(pred_left)


def row_check(gold: Sequence[Column], pred: Sequence[Column], matches: Sequence[int | None],
              ignore_order: bool) -> RowCheck:
    """The row-aligned verdict on a table the official match passed (``matches``: the result
    column it found for each gold column). Tries the official assignment first; if the rows
    do not line up under it, every other assignment of equal columns (identical result
    columns counted once), up to :data:`MAX_MAPPINGS`."""
    first = tuple(int(m) for m in matches if m is not None)
    if len(first) != len(gold):
        return RowCheck(None, "the official verdict failed")
    if not gold:
        return RowCheck(True, mapping=first)
    try:
        if rows_equal(gold, pred, first, ignore_order):
            return RowCheck(True, mapping=first)
        if not ignore_order:  # unreachable when the official match passed; kept honest
            return RowCheck(False, mapping=first)
        candidates = [_distinct([j for j in range(len(pred))
                                 if columns_match(g, pred[j], ignore_order)], pred)
                      for g in gold]
        total = int(np.prod([len(c) for c in candidates], dtype=np.float64))
        if total > MAX_MAPPINGS:
            return RowCheck(None, f"{total:,} candidate column mappings (more than "
                                  f"{MAX_MAPPINGS}); the official mapping does not keep rows "
                                  "together", first)
        for mapping in itertools.product(*candidates):
            if mapping != first and rows_equal(gold, pred, mapping, ignore_order):
                return RowCheck(True, mapping=tuple(mapping))
    except Undecided as exc:
        return RowCheck(None, str(exc), first)
    return RowCheck(False, mapping=first)


def _distinct(indices: list[int], pred: Sequence[Column]) -> list[int]:
    """Candidate result columns, one per set of identical columns (identical values in the same
    rows give the same rows, so trying one of them is enough)."""
    kept: list[int] = []
    for j in indices:
        if not any(_identical(pred[j], pred[k]) for k in kept):
            kept.append(j)
    return kept


def _identical(a: Column, b: Column) -> bool:
    if type(a) is not type(b) or not np.array_equal(a.missing, b.missing):
        return False
    if isinstance(a, NumColumn) and isinstance(b, NumColumn):
        return bool(np.array_equal(a.num, b.num, equal_nan=True))
    if isinstance(a, StrColumn) and isinstance(b, StrColumn):
        return bool(np.all(a.values == b.values))
    if isinstance(a, TimeColumn) and isinstance(b, TimeColumn):
        return bool(np.array_equal(a.times.view(np.int64), b.times.view(np.int64)))
    return False


def row_diff(gold: Sequence[Column], pred: Sequence[Column],
             mapping: Sequence[int | None], positions: Sequence[int]) -> RowDiff | None:
    """Gold rows missing from the result and result rows not in gold, as multisets over the
    mapped columns (``mapping``: a result column per gold column, None where none could be
    chosen: then there is no row diff, and the column diagnostics say why). The first
    :data:`SHOWN_ROWS` distinct rows of each side, with counts; in a shown missing row and the
    extra row closest to it, the cells that differ are marked."""
    if not gold or any(m is None for m in mapping):
        return None
    chosen = [pred[int(j)] for j in mapping if j is not None]
    columns = tuple(f"{g.name} (#{i})" for g, i in zip(gold, positions, strict=True))
    result_columns = tuple(p.name for p in chosen)
    pairs = [pair_codes(g, p) for g, p in zip(gold, chosen, strict=True)]
    try:
        gold_left, pred_left = unmatched_rows(pairs)
    except Undecided as exc:
        return RowDiff(columns, result_columns, (), (), 0, 0, note=str(exc))
    missing = _shown(gold, gold_left)
    extra = _shown(chosen, pred_left)
    missing, extra = _marked(missing, extra)
    return RowDiff(columns, result_columns, missing, extra, len(gold_left), len(pred_left))


def _shown(columns: Sequence[Column], rows: Array) -> tuple[DiffRow, ...]:
    """Distinct rows (by their text) in first-seen order, with how often each occurs."""
    counted: dict[tuple[str, ...], int] = {}
    for row in rows.tolist():
        text = tuple(column.text(row) for column in columns)
        if text not in counted and len(counted) >= SHOWN_ROWS:
            continue
        counted[text] = counted.get(text, 0) + 1
    return tuple(DiffRow(values, count) for values, count in counted.items())


def _marked(missing: tuple[DiffRow, ...], extra: tuple[DiffRow, ...]
            ) -> tuple[tuple[DiffRow, ...], tuple[DiffRow, ...]]:
    """Mark, in each shown row, the cells that differ from the closest row of the other side
    (fewest differing cells); a row with no counterpart is not marked."""
    def mark(rows: tuple[DiffRow, ...], other: tuple[DiffRow, ...]) -> tuple[DiffRow, ...]:
        if not other:
            return rows
        out = []
        for row in rows:
            closest = min(other, key=lambda o: sum(a != b for a, b in
                                                   zip(row.values, o.values, strict=True)))
            cells = tuple(k for k, (a, b) in enumerate(zip(row.values, closest.values,
                                                           strict=True)) if a != b)
            out.append(DiffRow(row.values, row.count, cells))
        return tuple(out)
    return mark(missing, extra), mark(extra, missing)
