"""What does one trial cost the runner when the agent does nothing? The sample suite run with
the noop agent (``--trials`` of each task, ``--keep-db``) through the whole pipeline
(:func:`~spider2local.run.plan.execute_run`: free-pass baseline, workspaces, checkpoint,
score, scan, collect, cleanup), two ways in one invocation:

- ``per-task``: the baseline, the reader children as they ran before the start snapshot was
  shared: every trial snapshots its start database in a child of its own, and the free-pass
  baseline scores each task in a child of its own;
- ``shared``: as the runner runs now: the free-pass child snapshots every start database once
  for the run's workspaces.

It prints the wall time of each run, the runner's overhead per trial (``total - agent`` of
each result's stage durations), how many reader children each started and what they cost,
and the ratios. Rounds alternate the two ways, so machine load drifts into each equally.

    .venv/bin/python benchmarks/bench_trial.py [--trials 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import collections
import io
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import anyio

from spider2local.audit import tasks as audit
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.run import plan as plan_mod
from spider2local.run.plan import execute_run, plan_run
from spider2local.run.progress import Progress
from spider2local.sandbox import dbreads as snapshot
from spider2local.sandbox import readers
from spider2local.suite.load import bundled_suite_path, load_suite

WAYS = ("per-task", "shared")


@contextmanager
def counting(children: collections.Counter[str], seconds: dict[str, float]) -> Iterator[None]:
    """Count every reader child by its job, and the seconds each kind took."""
    real = readers.ask_reader

    async def counted(module: str, request: dict[str, Any], *args: Any, **kw: Any) -> Any:
        kind = str(request.get("job") or ("free passes" if "many" in request else "score"))
        started = time.monotonic()
        try:
            return await real(module, request, *args, **kw)
        finally:
            children[kind] += 1
            seconds[kind] = seconds.get(kind, 0.0) + time.monotonic() - started

    setattr(readers, "ask_reader", counted)  # noqa: B010 (a patch, read at call time)
    try:
        yield
    finally:
        setattr(readers, "ask_reader", real)  # noqa: B010


@contextmanager
def per_task() -> Iterator[None]:
    """The baseline: no snapshot kept, one free-pass child per task."""
    remember, free = snapshot.remember_snapshot, audit.free_passes

    async def one_by_one(tasks: Sequence[TaskSpec]) -> dict[str, bool | None]:
        return {t.id: (await audit._baseline(t))[0] for t in tasks}

    setattr(snapshot, "remember_snapshot", lambda *_: None)  # noqa: B010 (patches, read at
    setattr(plan_mod, "free_passes", one_by_one)  # noqa: B010   call time)
    try:
        yield
    finally:
        setattr(snapshot, "remember_snapshot", remember)  # noqa: B010
        setattr(plan_mod, "free_passes", free)  # noqa: B010


def one_run(runs: Path, run_id: str, trials: int,
            way: Callable[[], Any]) -> tuple[float, list[float], collections.Counter[str],
                                             dict[str, float]]:
    suite = load_suite(bundled_suite_path())
    plan = plan_run(suite, load_dataset(suite), agent="noop", runs_dir=runs, run_id=run_id,
                    jobs=1, trials=trials, keep_db=True)
    children: collections.Counter[str] = collections.Counter()
    seconds: dict[str, float] = {}
    snapshot._cache.clear()  # each run starts as a fresh process would
    with way(), counting(children, seconds):
        started = time.monotonic()
        outcome = anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
        wall = time.monotonic() - started
    overheads = [r.durations["total"] - r.durations.get("agent", 0.0)
                 for r in outcome.ran.values()]
    return wall, overheads, children, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = Path(tempfile.mkdtemp(prefix="bench-trial-"))
    walls: dict[str, list[float]] = {w: [] for w in WAYS}
    over: dict[str, list[float]] = {w: [] for w in WAYS}
    kids: dict[str, collections.Counter[str]] = {w: collections.Counter() for w in WAYS}
    cost: dict[str, dict[str, float]] = {w: {} for w in WAYS}
    n_trials = dict.fromkeys(WAYS, 0)
    try:
        for k in range(args.rounds):
            for name in WAYS:
                way = per_task if name == "per-task" else nullcontext
                wall, overheads, children, seconds = one_run(runs, f"{name}-{k}", args.trials,
                                                             way)
                walls[name].append(wall)
                over[name] += overheads
                n_trials[name] += len(overheads)
                kids[name] += children
                for kind, s in seconds.items():
                    cost[name][kind] = cost[name].get(kind, 0.0) + s
    finally:
        shutil.rmtree(runs, ignore_errors=True)
    print(f"sample suite, noop agent, --trials {args.trials} --keep-db, {args.rounds} rounds")
    for name in WAYS:
        per = {kind: f"{n / n_trials[name]:.2f} ({cost[name][kind] / n:.2f} s each)"
               for kind, n in sorted(kids[name].items())}
        print(f"{name:<9} wall {statistics.median(walls[name]):6.1f} s  overhead per trial "
              f"{statistics.median(over[name]):5.2f} s  children per trial {per}")
    base, now = (statistics.median(walls[w]) for w in WAYS)
    ob, on = (statistics.median(over[w]) for w in WAYS)
    print(f"shared / per-task: wall {now / base:.2f}x, overhead per trial {on / ob:.2f}x, "
          f"reader children {sum(kids['shared'].values()) / sum(kids['per-task'].values()):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
