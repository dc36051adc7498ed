"""Turn ``score --gold FILE --tables ... --cols ... --ignore-order ...`` into eval parameters.

The options are validated by the same function that validates ``spider2_eval.jsonl``, so a
hand-typed evaluation obeys exactly the rules of a dataset's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spider2local.evaluation.params import EvalConfigError, EvalParams, parse_eval
from spider2local.exceptions import UserError


def params_from_options(gold: Path, tables: str | None, cols: str | None,
                        ignore_order: str | None) -> EvalParams:
    if not tables:
        raise UserError("--gold needs --tables (the graded tables, comma-separated)")
    names = [t.strip() for t in tables.split(",") if t.strip()]
    parameters: dict[str, Any] = {
        "gold": gold.name,
        "condition_tabs": names,
        "condition_cols": _json_option("--cols", cols, [[] for _ in names]),
        "ignore_orders": _json_option("--ignore-order", ignore_order, [False for _ in names]),
    }
    if isinstance(parameters["ignore_orders"], bool):  # one value for every table
        parameters["ignore_orders"] = [parameters["ignore_orders"]] * len(names)
    try:
        return parse_eval({"func": "duckdb_match", "parameters": parameters})
    except EvalConfigError as exc:
        raise UserError(f"bad score options: {exc.reason}",
                        fix="one --cols list and one --ignore-order value per table") from None


def _json_option(name: str, value: str | None, default: Any) -> Any:
    if value is None:
        return default
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise UserError(f"{name} is not JSON: {value!r}",
                        fix=f"e.g. {name} '[[0, 1], []]'" if name == "--cols"
                        else f"e.g. {name} '[true, false]'") from None
