"""Row-aligned check and row diff speed, as ratios to the official match, in one process.

The table of bench_scoring.py: 100,000 rows, 10 graded gold columns of mixed types, a result of
12 columns (2 extra) with rows shuffled and the boolean column stored as INTEGER. Both frames are
read once; every timed run then starts from fresh typed columns, as scoring does:

* official: typed columns built from the frames, then the official column match (what
  ``score_table`` spends before the check);
* check (aligned): the row-aligned check on those columns, rows kept together (true);
* check (lenient): the same with every graded column of the result shuffled on its own
  (the official match passes; the check is false after trying every candidate mapping);
* diff: one cell changed (the table fails), the row diff under the fallback mapping.

Each is run once untimed, then 5 times; the minimum of each is used for the ratio (target: the
check at most 2x the official match). Run: .venv/bin/python benchmarks/bench_rows.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_scoring import build
from spider2local.evaluation import rows
from spider2local.evaluation.column_types import Column
from spider2local.evaluation.columns import frame_columns
from spider2local.evaluation.refstack import reference_frame
from spider2local.evaluation.score import fallback_mapping, match_columns

REPEATS = 5


def _read(db: Path) -> pd.DataFrame:
    with duckdb.connect(str(db), read_only=True) as con:
        return reference_frame(con.execute("SELECT * FROM t").fetchdf())


def _official(gold: pd.DataFrame, pred: pd.DataFrame
              ) -> tuple[list[Column], list[Column], list[int | None]]:
    g, p = frame_columns(gold), frame_columns(pred)
    return g, p, match_columns(g, p, True)


def _best(step: Callable[[], float]) -> float:
    step()
    return min(step() for _ in range(REPEATS))


def _timed(gold: pd.DataFrame, pred: pd.DataFrame, then: str) -> tuple[float, float]:
    """(official seconds, seconds of ``then`` on the columns the official match built)."""
    official_times, after_times = [], []
    for _ in range(REPEATS + 1):
        start = time.perf_counter()
        g, p, matches = _official(gold, pred)
        middle = time.perf_counter()
        if then == "check":
            result = rows.row_check(g, p, matches, True)
            assert result.aligned is not None, result.note
        else:
            diff = rows.row_diff(g, p, fallback_mapping(g, p, matches), list(range(len(g))))
            assert diff is not None and diff.missing_total == 1 == diff.extra_total, diff
        end = time.perf_counter()
        official_times.append(middle - start)
        after_times.append(end - middle)
    return min(official_times[1:]), min(after_times[1:])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gold_db, result_db = build(Path(tmp), 100_000, 10, 2)
        gold, pred = _read(gold_db), _read(result_db)
    rng = np.random.default_rng(7)
    torn = pred.copy()
    for name in [c for c in torn.columns if not str(c).startswith("extra")]:
        torn[name] = torn[name].to_numpy()[rng.permutation(len(torn))]
    one_cell = pred.copy()
    one_cell.loc[one_cell.index[500], "c0"] += 777
    print("100,000 rows x 10 graded columns (12 in result), minimum of "
          f"{REPEATS} warm runs each:")
    for label, frame, then in (("check, rows kept together", pred, "check"),
                               ("check, columns shuffled on their own", torn, "check"),
                               ("row diff, one cell changed", one_cell, "diff")):
        official, after = _timed(gold, frame, then)
        print(f"  {label}: official match {official:.3f} s, then {after:.3f} s "
              f"= {after / official:.2f}x the official match (target <= 2x)")


if __name__ == "__main__":
    main()
