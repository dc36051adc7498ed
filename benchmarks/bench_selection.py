"""Does task selection stay linear? ``select_tasks`` over 20,000 ids, before vs after.

Selection looked every id up with a scan of the task list (``Dataset.get`` was a linear search),
so selecting all of 20,000 tasks took 27 s. The baseline here is that old lookup, kept only in
this script (a ``Dataset`` whose ``get`` scans), run in the same process on the same data as the
current indexed one; the ratio is what counts (the machine may be shared). Target: the current
selection at least 50x faster than the baseline at 20,000 ids, and under 1 s.

    .venv/bin/python benchmarks/bench_selection.py [--tasks 20000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.run.selection import Shard, select_tasks
from spider2local.suite.model import SAMPLE, DateSource, Suite, TaskSettings

TARGET_RATIO = 50.0


class ScanningDataset(Dataset):
    """The old lookup: one scan of the task list per id (the quadratic baseline)."""

    def get(self, task_id: str) -> TaskSpec | None:
        return next((t for t in self.tasks if t.id == task_id), None)


def make_tasks(count: int) -> tuple[TaskSpec, ...]:
    return tuple(TaskSpec(id=f"task{i:06d}", instruction="x", project_dir=Path("/nonexistent"),
                          start_db=None, gold=None, settings=TaskSettings(),
                          date=dt.date(2024, 9, 15), date_source=DateSource.DEFAULT)
                  for i in range(count))


def timed(data: Dataset) -> float:
    started = time.perf_counter()
    select_tasks(data)
    select_tasks(data, shard=Shard(2, 3), limit=100)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    args = parser.parse_args()
    tasks = make_tasks(args.tasks)
    suite = Suite(Path("suite.toml"), SAMPLE)
    baseline = timed(ScanningDataset(Path("/nonexistent"), suite, tasks))
    current = timed(Dataset(Path("/nonexistent"), suite, tasks))
    ratio = baseline / current if current else float("inf")
    print(f"{args.tasks} ids: scanning lookup {baseline:.2f}s, indexed {current:.3f}s, "
          f"ratio {ratio:.0f}x (target >= {TARGET_RATIO:.0f}x, < 1 s; machine may be shared)")
    return 0 if ratio >= TARGET_RATIO and current < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
