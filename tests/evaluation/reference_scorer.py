"""A slow, literal re-statement of upstream's Spider2-DBT scorer, used as the oracle in tests.

Upstream (xlang-ai/Spider2, spider2-dbt/evaluation_suite/eval_utils.py: ``duckdb_match`` and
``compare_pandas_table``) is described here step by step in our own words; nothing is optimised,
so the fast implementation can be checked against it. Frames are read exactly as upstream reads
them: one read-only connection per table, ``SELECT * FROM <name>``, ``fetchdf()``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

ABS_TOL = 0.01


def read_frame(db: Path | str, table: str) -> pd.DataFrame:
    con = duckdb.connect(database=str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM {table}").fetchdf()
    finally:
        con.close()


def read_as_reference_stack(db: Path | str, table: str) -> pd.DataFrame:
    """:func:`read_frame`, then turned into the frame duckdb 1.1.3 would have returned (the
    conversion tests/evaluation/test_refstack.py checks against the real 1.1.3). Imported
    lazily: refstack_child.py loads this module under the reference stack, without
    spider2local."""
    from spider2local.evaluation.refstack import reference_frame

    return reference_frame(read_frame(db, table))


Reader = Callable[[Path | str, str], pd.DataFrame]
"""How frames are read: :func:`read_frame` (the installed duckdb's frames as they come), or a
reading that first turns them into the reference stack's (tests of spider2local's verdicts,
which are defined on those)."""


def upstream_key(value: Any) -> tuple[bool, str, bool]:
    return (value is None, str(value), isinstance(value, (int, float)))


def lists_agree(gold: list[Any], pred: list[Any], ignore_order: bool) -> bool:
    """Upstream's ``vectors_match``: any exception inside means 'no match'."""
    try:
        if ignore_order:
            gold = sorted(gold, key=upstream_key)
            pred = sorted(pred, key=upstream_key)
        if len(gold) != len(pred):
            return False
        for a, b in zip(gold, pred, strict=True):
            if pd.isna(a) and pd.isna(b):
                continue
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                if not math.isclose(float(a), float(b), abs_tol=ABS_TOL):
                    return False
            elif a != b:
                return False
        return True
    except Exception:
        return False


def column_lists(frame: pd.DataFrame) -> list[list[Any]]:
    """The per-column value lists upstream compares (note: built from the whole frame)."""
    return frame.transpose().values.tolist()  # type: ignore[no-any-return]


def gold_column_flags(pred: pd.DataFrame, gold: pd.DataFrame, condition_cols: Sequence[int],
                      ignore_order: bool) -> list[bool]:
    """For each graded gold column: does some prediction column agree with it?"""
    return flags_against(column_lists(pred), gold, condition_cols, ignore_order)


def flags_against(pred_lists: list[list[Any]], gold: pd.DataFrame,
                  condition_cols: Sequence[int], ignore_order: bool) -> list[bool]:
    """:func:`gold_column_flags` with the prediction's column lists already built (they do not
    depend on the grading, so tests grading one pair several ways build them once)."""
    cols = list(condition_cols)
    graded = gold.iloc[:, cols] if cols != [] else gold
    return [any(lists_agree(g, p, ignore_order) for p in pred_lists)
            for g in column_lists(graded)]


def table_agrees(pred: pd.DataFrame, gold: pd.DataFrame, condition_cols: Sequence[int],
                 ignore_order: bool) -> bool:
    """Upstream's ``compare_pandas_table`` as a bool (it returns 1 or 0), with its full cost:
    upstream checks every gold column against every prediction column until one agrees, and
    when one does, it walks the prediction columns a second time up to that same match (the
    second walk changes nothing but the running time, which the benchmark measures)."""
    cols = list(condition_cols)
    graded = gold.iloc[:, cols] if cols != [] else gold
    pred_lists = column_lists(pred)
    verdict = True
    for g in column_lists(graded):
        if not any(lists_agree(g, p, ignore_order) for p in pred_lists):
            verdict = False
        else:
            for p in pred_lists:
                if lists_agree(g, p, ignore_order):
                    break
    return verdict


def table_verdicts(result: Path, gold: Path, tabs: Sequence[str],
                   cols: Sequence[Sequence[int]], orders: Sequence[bool],
                   read: Reader = read_frame) -> list[bool]:
    """Per graded table, the verdict upstream would reach for that table on its own
    (a table that cannot be read, or an exception while comparing, gives False)."""
    verdicts = []
    for name, table_cols, ignore in zip(tabs, cols, orders, strict=True):
        gold_frame = read(gold, name)
        try:
            pred_frame = read(result, name)
            verdicts.append(table_agrees(pred_frame, gold_frame, table_cols, ignore))
        except Exception:
            verdicts.append(False)
    return verdicts


def duckdb_match(result: Path, gold: Path, tabs: Sequence[str], cols: Sequence[Sequence[int]],
                 orders: Sequence[bool], read: Reader = read_frame) -> int:
    """Upstream's task verdict (1 or 0), including evaluate.py's 'any exception scores 0'."""
    try:
        gold_frames = [read(gold, name) for name in tabs]
        try:
            pred_frames = [read(result, name) for name in tabs]
        except Exception:
            return 0
        for pred, gold_frame, table_cols, ignore in zip(pred_frames, gold_frames, cols, orders,
                                                        strict=True):
            if not table_agrees(pred, gold_frame, table_cols, ignore):
                return 0
        return 1
    except Exception:
        return 0


def _lists(frame: pd.DataFrame) -> list[list[Any]]:
    return column_lists(frame) if len(frame) else [[] for _ in frame.columns]


def _values_agree(a: Any, b: Any) -> bool:
    """Upstream's rule on one pair of values (a one-element ``vectors_match``)."""
    return lists_agree([a], [b], False)


def _perfect_matching(gold_rows: list[tuple[Any, ...]], pred_rows: list[tuple[Any, ...]]) -> bool:
    """Does every gold row pair with its own equal result row (Kuhn's augmenting paths)?"""
    if len(gold_rows) != len(pred_rows):
        return False
    edges = [[j for j, p in enumerate(pred_rows)
              if all(_values_agree(x, y) for x, y in zip(g, p, strict=True))]
             for g in gold_rows]
    partner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j not in seen:
                seen.add(j)
                if j not in partner or augment(partner[j], seen):
                    partner[j] = i
                    return True
        return False

    return all(augment(i, set()) for i in range(len(gold_rows)))


def rows_agree(pred: pd.DataFrame, gold: pd.DataFrame, condition_cols: Sequence[int],
               ignore_order: bool) -> bool | None:
    """The row-aligned check by brute force: None when upstream's match fails; else whether
    some assignment of equal result columns to gold columns makes the rows equal, as a
    multiset (every row pairing tried by augmenting paths) or in order."""
    cols = list(condition_cols)
    graded = gold.iloc[:, cols] if cols != [] else gold
    g_lists, p_lists = _lists(graded), _lists(pred)
    candidates = [[j for j, p in enumerate(p_lists) if lists_agree(g, p, ignore_order)]
                  for g in g_lists]
    if not all(candidates):
        return None
    gold_rows = [tuple(g[r] for g in g_lists) for r in range(len(graded))]
    for mapping in itertools.product(*candidates):
        pred_rows = [tuple(p_lists[j][r] for j in mapping) for r in range(len(pred))]
        if ignore_order:
            if _perfect_matching(gold_rows, pred_rows):
                return True
        elif len(gold_rows) == len(pred_rows) and all(
                all(_values_agree(x, y) for x, y in zip(g, p, strict=True))
                for g, p in zip(gold_rows, pred_rows, strict=True)):
            return True
    return False
