"""What do the reader sandboxes cost per task? The runner's DuckDB readers of one task (the
start snapshot, the checkpoint, the score, the graded tables' copy and one query-tool call) on
a copy of the sample's bakery001 database against its gold, three ways:

- ``in-process``: the readers as they ran before issue 19 (no child, no sandbox), the baseline;
- ``children``: each reader a ``python -I -m`` child without namespaces (the fallback);
- ``sandboxed``: each reader a child in its own namespace sandbox (the default where it works).

Rounds alternate the three so machine load drifts into each equally; medians are compared.
Most of a child's cost is Python importing duckdb (and pandas for the scorer), not the sandbox.

    .venv/bin/python benchmarks/bench_readers.py [--reps 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from spider2local.dataset.load import load_dataset
from spider2local.db.connect import open_database
from spider2local.db.snapshot import read_snapshot
from spider2local.dbtools.query import QueryService
from spider2local.evaluation.params import EvalParams
from spider2local.evaluation.score import score_database
from spider2local.run.graded import keep_graded
from spider2local.sandbox import graded, readers
from spider2local.sandbox.dbreads import checkpoint_sandboxed, snapshot_sandboxed
from spider2local.sandbox.probe import probe
from spider2local.sandbox.scoring import score_sandboxed_sync
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.suite.model import SAMPLE

QUERY = "SELECT count(*) FROM information_schema.tables"


def in_process(db: Path, gold: Path, params: EvalParams) -> dict[str, float]:
    def checkpoint() -> None:
        con = open_database(db, untrusted=True, write=True)
        con.execute("CHECKPOINT")
        con.close()

    def query() -> None:
        with open_database(db, untrusted=True) as con:
            con.execute(QUERY).fetchall()

    return _timed({"snapshot": lambda: read_snapshot(db, db.name),
                   "checkpoint": checkpoint,
                   "score": lambda: score_database(db, gold, params),
                   "graded": lambda: graded.keep_graded(db, _fresh(db), params.condition_tabs),
                   "query": query})


def children(db: Path, gold: Path, params: EvalParams) -> dict[str, float]:
    service = QueryService(db, {"PATH": "/usr/bin:/bin"}, db.parent / "queries.jsonl",
                           root=db.parent)

    def query() -> None:
        result = anyio.run(service.run_sql, QUERY)
        if result.error:
            raise SystemExit(f"query failed: {result.error}")

    def kept() -> None:
        anyio.run(keep_graded, db, _fresh(db), params.condition_tabs)

    return _timed({"snapshot": lambda: snapshot_sandboxed(db),
                   "checkpoint": lambda: checkpoint_sandboxed(db, 3.0),
                   "score": lambda: score_sandboxed_sync(db, gold, params),
                   "graded": kept,
                   "query": query})


def _fresh(db: Path) -> Path:
    """Where the graded copy goes: a name not taken (the copy refuses an existing file)."""
    out = db.parent / "graded.duckdb"
    out.unlink(missing_ok=True)
    return out


def _timed(steps: dict[str, Callable[[], object]]) -> dict[str, float]:
    found = {}
    for name, step in steps.items():
        started = time.perf_counter()
        step()
        found[name] = time.perf_counter() - started
    found["task"] = sum(found.values())
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if not probe().ok:
        print(f"no namespace sandbox here ({probe().reason}): only children are measured",
              file=sys.stderr)
    data = load_dataset(load_suite(bundled_suite_path()).with_dataset(SAMPLE))
    task = next(t for t in data.tasks if t.id == "bakery001")
    assert task.gold is not None and task.start_db is not None
    ways = ["in-process", "children", *(["sandboxed"] if probe().ok else [])]
    times: dict[str, list[dict[str, float]]] = {w: [] for w in ways}
    real_reason = readers.unsandboxed_reason
    with tempfile.TemporaryDirectory(prefix="bench-readers-") as tmp:
        work = Path(tmp) / "ws"
        work.mkdir()
        db = work / task.start_db.name
        for _ in range(args.reps):
            for way in ways:
                shutil.copyfile(task.start_db, db)
                if way == "in-process":
                    times[way].append(in_process(db, task.gold.db, task.gold.params))
                    continue
                setattr(readers, "unsandboxed_reason",  # noqa: B010 (a patch, read at call time)
                        (lambda: "benchmark") if way == "children" else real_reason)
                try:
                    times[way].append(children(db, task.gold.db, task.gold.params))
                finally:
                    setattr(readers, "unsandboxed_reason", real_reason)  # noqa: B010
    base = {k: statistics.median(t[k] for t in times["in-process"]) for k in times["in-process"][0]}
    print(f"reader cost per task, median of {args.reps} ({dt.date.today()}), bakery001")
    print(f"{'step':<11}" + "".join(f"{w:>22}" for w in ways))
    for step in base:
        cells = []
        for way in ways:
            median = statistics.median(t[step] for t in times[way])
            cells.append(f"{median * 1000:9.0f} ms {median / base[step]:6.1f}x  ")
        print(f"{step:<11}" + "".join(f"{c:>22}" for c in cells))
    if "sandboxed" in times:
        extra = statistics.median(t["task"] for t in times["sandboxed"]) - \
            statistics.median(t["task"] for t in times["children"])
        print(f"the namespaces themselves: {extra * 1000:+.0f} ms per task over plain children")
    return 0


if __name__ == "__main__":
    sys.exit(main())
