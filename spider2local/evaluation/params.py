"""The parameters of upstream's ``duckdb_match``: which tables and columns are graded, and how.

They come from a dataset's ``spider2_eval.jsonl`` or from ``score --gold`` options, and both go
through :func:`parse_eval`, so a hand-typed evaluation obeys exactly the rules of a dataset's.
They belong to the evaluation (the scorer is what they parameterise); the dataset only reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EvalParams:
    """One task's ``duckdb_match`` parameters from ``spider2_eval.jsonl``."""

    gold: str
    """File name of the gold database inside ``evaluation_suite/gold/<id>/``."""
    condition_tabs: tuple[str, ...]
    condition_cols: tuple[tuple[int, ...], ...]
    """Per table, the gold column positions to grade; an empty tuple means every column.
    Positions are taken as pandas ``iloc`` takes them (upstream cuts the gold frame with
    ``gold.iloc[:, cols]``): negative ones count from the end, and one outside the table is not
    refused here but fails that table at scoring time, as upstream's iloc does
    (:func:`gold_positions`)."""
    ignore_orders: tuple[bool, ...]


class EvalConfigError(ValueError):
    """An ``evaluation`` object that is not a usable ``duckdb_match`` config. ``reason`` says
    what is wrong without naming where it came from: the loader calls it an evaluation config
    problem, ``score --gold`` a bad option."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_eval(evaluation: Any) -> EvalParams:
    """Validate one ``evaluation`` object; raise :class:`EvalConfigError` saying what is wrong."""
    if not isinstance(evaluation, dict) or evaluation.get("func") != "duckdb_match":
        raise EvalConfigError("func is not duckdb_match")
    p = evaluation.get("parameters")
    if not isinstance(p, dict) or not isinstance(p.get("gold"), str):
        raise EvalConfigError("parameters.gold missing")
    tabs, cols, orders = p.get("condition_tabs"), p.get("condition_cols"), p.get("ignore_orders")
    if not isinstance(tabs, list) or not tabs or not all(isinstance(t, str) for t in tabs):
        raise EvalConfigError("condition_tabs must be a non-empty list of table names")
    cols = [[] for _ in tabs] if cols is None else cols
    orders = [False for _ in tabs] if orders is None else orders
    if not isinstance(cols, list) or not isinstance(orders, list):
        raise EvalConfigError("condition_cols and ignore_orders must be lists")
    if not len(tabs) == len(cols) == len(orders):
        raise EvalConfigError(f"condition_tabs, condition_cols and ignore_orders have unequal "
                              f"lengths ({len(tabs)}, {len(cols)}, {len(orders)})")
    if not all(isinstance(c, list) and all(_is_int(i) for i in c) for c in cols):
        raise EvalConfigError("condition_cols must be lists of integer column positions")
    if not all(isinstance(o, bool) for o in orders):
        raise EvalConfigError("ignore_orders must be true or false")
    return EvalParams(p["gold"], tuple(tabs), tuple(tuple(c) for c in cols), tuple(orders))


def gold_positions(cols: Sequence[int], width: int) -> list[int]:
    """The gold columns ``gold.iloc[:, cols]`` selects from a table of ``width`` columns, as
    non-negative positions in selection order (repeats kept); every column when ``cols`` is
    empty (upstream skips the cut for ``[]``).

    Raises :class:`IndexError` exactly when upstream's iloc raises (any position outside
    ``-width <= col < width``, huge ones included): upstream then lets the exception out of
    ``duckdb_match`` and evaluate.py scores the task 0, so the caller scores that table 0.
    The one owner of the rule: the scorer and the dataset audit both resolve positions here.
    """
    if not cols:
        return list(range(width))
    positions = []
    for col in cols:
        if not -width <= col < width:
            raise IndexError(f"condition_cols position {col} is out of range for a gold table "
                             f"of {width} columns (upstream's iloc raises; the table scores 0)")
        positions.append(col % width)
    return positions


def _is_int(value: Any) -> bool:
    """A JSON integer. Not a bool: ``iloc`` reads a list of bools as a mask, not positions, and
    no dataset means that; negative is fine (iloc counts it from the end)."""
    return isinstance(value, int) and not isinstance(value, bool)
