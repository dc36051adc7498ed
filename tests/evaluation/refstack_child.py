"""Run under the reference stack's interpreter (duckdb 1.1.3, pandas 2.2.3): upstream's reading
and comparison (our literal transcription, reference_scorer.py) on the tables a test names.

Needs only duckdb, pandas and numpy (never spider2local). Reads a JSON job from stdin:
``{"gold": path, "result": path, "tables": [{"name": str, "gradings": [[cols, ignore], ...]}]}``
and prints, per table, the Python values upstream compares on each side (type name and repr of
every value of ``transpose().values.tolist()``, or the error that stopped the read) and the
verdict of every grading, plus the versions it ran under.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import duckdb
import numpy as np
import pandas as pd
import reference_scorer as ref


def typed(frame: pd.DataFrame) -> list[list[list[str]]]:
    lists = ref.column_lists(frame) if len(frame) else [[] for _ in frame.columns]
    return [[[type(v).__name__, repr(v)] for v in values] for values in lists]


def read(con: duckdb.DuckDBPyConnection,
         table: str) -> tuple[pd.DataFrame | None, dict[str, Any]]:
    """Upstream's read (``SELECT * FROM <name>`` then ``fetchdf``) on one connection per file:
    upstream opens one per table, which gives the same frame and, for the hundreds of tables
    of one test file, costs a minute of reloading its catalog."""
    try:
        frame = con.execute(f"SELECT * FROM {table}").fetchdf()
    except Exception as exc:
        return None, {"error": f"{type(exc).__name__}: {exc}"}
    return frame, {"values": typed(frame)}


def main() -> None:
    job = json.loads(sys.stdin.read())
    out: dict[str, Any] = {"versions": {"duckdb": duckdb.__version__, "pandas": pd.__version__,
                                        "numpy": np.__version__}, "tables": []}
    gold_con = duckdb.connect(job["gold"], read_only=True)
    result_con = duckdb.connect(job["result"], read_only=True)
    for table in job["tables"]:
        gold, gold_seen = read(gold_con, table["name"])
        pred, pred_seen = read(result_con, table["name"])
        verdicts: list[bool] | None = None
        if gold is not None:
            verdicts = []
            for cols, ignore in table["gradings"]:
                try:  # upstream: an unreadable result table, or any exception, scores 0
                    verdicts.append(pred is not None
                                    and bool(ref.table_agrees(pred, gold, cols, ignore)))
                except Exception:
                    verdicts.append(False)
        out["tables"].append({"gold": gold_seen, "result": pred_seen, "verdicts": verdicts})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
