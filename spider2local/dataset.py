"""Load a Spider2-DBT dataset in upstream's layout into typed task specs (being written)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalParams:
    """One task's ``duckdb_match`` parameters from ``spider2_eval.jsonl``."""

    gold: str
    """File name of the gold database inside ``evaluation_suite/gold/<id>/``."""
    condition_tabs: tuple[str, ...]
    condition_cols: tuple[tuple[int, ...], ...]
    """Per table, the gold column positions to grade; an empty tuple means every column."""
    ignore_orders: tuple[bool, ...]
